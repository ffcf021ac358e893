"""Set up nodes that share no filesystem: copy this workflow to the same
path on every node and build its pinned .venv there (`make venv`), through
the launcher that trains. The launch node serves the copy over HTTP at a
secret URL; each node runs bootstrap.py with its system python3.

    python -m workflow.scripts.nodes.setup --config C
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

from workflow.scripts.common import step
from workflow.scripts.common.errors import UserError
from workflow.scripts.common.views import EnvironmentView
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


def serve_once(data: bytes, address: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve `data` at a secret URL on the launch node while the nodes fetch it."""
    token = secrets.token_hex(16)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == f"/{token}"
            self.send_response(200 if ok else 404)
            self.end_headers()
            if ok:
                self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{address}:{server.server_address[1]}/{token}"


def setup(config: EnvironmentView | dict, timeout: float) -> list[dict]:
    config = EnvironmentView.pick(config)
    dist = config.distributed
    hosts = command.run_hosts(dist)
    if not hosts:
        raise UserError("setup_nodes needs distributed.hostfile (the nodes to set up)")
    master = command.master_addr(hosts)
    address = master if command.is_local_address(master) else route_source(master)
    data = workflow_archive()
    server, url = serve_once(data, address)
    env = {"CPUDDP_SETUP_URL": url, "CPUDDP_SETUP_ROOT": str(ROOT),
           "CPUDDP_SETUP_SHA256": hashlib.sha256(data).hexdigest()}
    try:
        program = ["python3", "-c", bootstrap.standalone_program()]
        reports, problems = reach_each(config, mpi.detect_launcher(dist), hosts, program, timeout, env,
                                       kind="SETUP")
    finally:
        server.shutdown()
    problems += [f"node {hosts[r['rank']]}: `make venv` failed (exit code {r['make']})" for r in reports if r["make"]]
    if problems:
        raise UserError("setup_nodes failed: " + "; ".join(problems))
    return [{"node": hosts[r["rank"]], "files_written": r["written"]} for r in reports]


def main(argv=None) -> None:
    parser = step.parser(__doc__)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for the whole set-up")
    args = parser.parse_args(argv)
    config = step.read_view(args, EnvironmentView)
    for node in setup(config, args.timeout):
        print(f"node {node['node']}: workflow copy in {ROOT} ({node['files_written']} files written), "
              ".venv ready", file=sys.stderr)


if __name__ == "__main__":
    step.entry(main)
