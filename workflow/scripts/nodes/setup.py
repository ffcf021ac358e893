"""Set up nodes that share no filesystem: copy this workflow to the same
path on every node and build its pinned .venv there (`make venv`), and with
--data the experiment's data folder (tokenized data, the fetched model) to
the same path on every node that does not already see the same files,
through the launcher that trains. The launch node serves both over HTTP at
a secret URL, which reaches the nodes through the launcher's environment
(named on its command line, never valued: `ps` shows that line to every
user); each node runs bootstrap.py with its system python3.

    python -m workflow.scripts.nodes.setup --config C [--data results/<experiment>/data]
"""

from __future__ import annotations

import hashlib
import http.server
import io
import secrets
import sys
import tarfile
import threading
from pathlib import Path

from workflow.scripts.settings import step
from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.views import EnvironmentView
from workflow.scripts.launch import command, mpi
from workflow.scripts.nodes import bootstrap
from workflow.scripts.nodes.describe import REVISION_PATHS, ROOT, workflow_files
from workflow.scripts.nodes.probe import route_source
from workflow.scripts.launch.reach import reach_each

# What set-up copies: the code that runs and what builds its environment.
SETUP_PATHS = REVISION_PATHS + ("Makefile", "requirements.txt", "config.yaml", "mk", "envs", "profiles",
                                "experiments")


def workflow_archive(root: Path = ROOT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in workflow_files(root, SETUP_PATHS):
            tar.add(path, arcname=str(path.relative_to(root)), recursive=False)
    return buffer.getvalue()


def stream_folder(folder: Path, out) -> None:
    """An uncompressed tar of a folder, written as it is read (a model is large)."""
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)


def serve_once(data: bytes, address: str, folder: Path | None = None) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve `data` at a secret URL on the launch node while the nodes fetch
    it, and `folder` as a tar at that URL + /data."""
    token = secrets.token_hex(16)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == f"/{token}" or (folder is not None and self.path == f"/{token}/data")
            self.send_response(200 if ok else 404)
            self.end_headers()
            if ok and self.path.endswith("/data"):
                stream_folder(folder, self.wfile)
            elif ok:
                self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{address}:{server.server_address[1]}/{token}"


def data_env(folder: Path | None) -> dict:
    """Where the data goes on the nodes (the same absolute path) and its digest."""
    if folder is None:
        return {}
    if not folder.is_dir():
        raise UserError(f"setup_nodes: no data folder {folder}; run the data stage first")
    return {"CPUDDP_SETUP_DATA": str(folder), "CPUDDP_SETUP_DATA_SHA256": bootstrap.tree_digest(str(folder))}


def setup(config: EnvironmentView, timeout: float, data: Path | None = None) -> list[dict]:
    dist = config.distributed
    hosts = command.run_hosts(dist)
    if not hosts:
        raise UserError("setup_nodes needs distributed.hostfile (the nodes to set up)")
    master = command.master_addr(hosts)
    address = master if command.is_local_address(master) else route_source(master)
    folder = Path(data).resolve() if data is not None else None
    env = data_env(folder)
    archive = workflow_archive()
    server, url = serve_once(archive, address, folder)
    env.update({"CPUDDP_SETUP_ROOT": str(ROOT), "CPUDDP_SETUP_SHA256": hashlib.sha256(archive).hexdigest()})
    try:
        program = ["python3", "-c", bootstrap.standalone_program()]
        # the URL is the secret: through the launcher's environment, never its command line
        reports, problems = reach_each(dist, mpi.detect_launcher(dist), hosts, program, timeout, env,
                                       kind="SETUP", secret={"CPUDDP_SETUP_URL": url})
    finally:
        server.shutdown()
    problems += [f"node {hosts[r['rank']]}: `make venv` failed (exit code {r['make']})" for r in reports if r["make"]]
    if problems:
        raise UserError("setup_nodes failed: " + "; ".join(problems))
    return [{"node": hosts[r["rank"]], "files_written": r["written"], "data": r.get("data")} for r in reports]


def data_said(node: dict, folder) -> str:
    if node["data"] is None:
        return ""
    if node["data"] == "same":
        return f"; data in {folder}: the same files already there, not copied"
    return f"; data copied to {folder} ({node['data']} files written)"


def main(argv=None) -> None:
    parser = step.parser(__doc__)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for the whole set-up")
    parser.add_argument("--data", type=Path, help="the experiment's data folder, put at the same path on every node")
    args = parser.parse_args(argv)
    config = step.read_view(args, EnvironmentView)
    folder = args.data.resolve() if args.data else None
    for node in setup(config, args.timeout, folder):
        print(f"node {node['node']}: workflow copy in {ROOT} ({node['files_written']} files written), "
              f".venv ready{data_said(node, folder)}", file=sys.stderr)


if __name__ == "__main__":
    step.entry(main)
