"""Every node of a run: the environment check, rank pinning, node set-up.

    nodes check --config C --out environment.json   one probe per node, through the launcher
    nodes probe --config-json J --master-addr A     (what each node runs for `check`)
    nodes pin --threads T -- PROGRAM...             (every rank: bind to its cores, exec)
    nodes setup --config C                          copy this workflow to every node, `make venv` there

The check launches one rank per node with the same launcher as training and
reads one JSON line from each; all nodes must agree on Python, torch,
transformers, IPEX and oneCCL versions and on the workflow revision. A node
that does not answer within distributed.check_timeout_seconds is named.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import http.server
import io
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

from workflow.scripts.launch import command as launch, ranks as dist_env
from workflow.scripts.nodes import describe as environment
from workflow.scripts.common import hardware
from workflow.scripts.common.atomic import write_json
from workflow.scripts.common.errors import UserError, run_cli

ROOT = Path(__file__).resolve().parents[3]
# What the revision covers (the code that runs) and what set-up copies besides.
REVISION_PATHS = ("Snakefile", "requirements.lock", "workflow")
SETUP_PATHS = REVISION_PATHS + ("Makefile", "requirements.txt", "config.yaml", "mk", "envs", "profiles",
                                "experiments")
AGREE = {"python": "Python", "torch": "torch", "transformers": "transformers",
         "intel_extension_for_pytorch": "IPEX", "oneccl_bind_pt": "oneCCL bindings"}
DECISIONS = ("backend", "precision", "ipex")
TELLING = re.compile(r"ssh:|error|refused|denied|timed out|no route|not found|no module", re.I)


# ------------------------------------------------------------------ revision

def workflow_files(root: Path, paths=REVISION_PATHS) -> list[Path]:
    found = []
    for name in paths:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                      and not p.name.endswith((".pyc", ".cpuddp-tmp"))]
    return sorted(found)


def revision(root: Path = ROOT) -> str:
    """Digest of the workflow's code: equal on two nodes iff they run the same code."""
    digest = hashlib.sha256()
    for path in workflow_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


# ------------------------------------------------------------------ pinning

def physical_cores(text: str | None = None, allowed=None) -> list[list[tuple[int, ...]]]:
    """Per socket, its physical cores as tuples of the logical CPUs we may use."""
    text = hardware.CPUINFO.read_text() if text is None else text
    allowed = set(os.sched_getaffinity(0) if allowed is None else allowed)
    sockets: dict[str, dict[str, list[int]]] = {}
    for block in hardware._cpuinfo_blocks(text):
        if "processor" not in block or int(block["processor"]) not in allowed:
            continue
        core = sockets.setdefault(block.get("physical id", "0"), {})
        core.setdefault(block.get("core id", block["processor"]), []).append(int(block["processor"]))
    return [[tuple(cpus) for _, cpus in sorted(cores.items(), key=lambda c: min(c[1]))]
            for _, cores in sorted(sockets.items(), key=lambda s: int(s[0]))]


def rank_cpus(local_rank: int, local_size: int, threads: int, sockets) -> set[int] | None:
    """The logical CPUs of a rank's `threads` cores, ranks spread evenly over the
    sockets when they divide; None when the node has too few cores to pin."""
    if threads * local_size > sum(len(s) for s in sockets):
        return None
    per_socket = local_size // len(sockets)
    if len(sockets) > 1 and local_size % len(sockets) == 0 and \
            all(len(s) >= threads * per_socket for s in sockets):
        cores = sockets[local_rank // per_socket]
        start = (local_rank % per_socket) * threads
    else:
        cores = [core for socket_cores in sockets for core in socket_cores]
        start = local_rank * threads
    return {cpu for core in cores[start:start + threads] for cpu in core}


def pin_main(args) -> None:
    """Bind this rank to its cores, then become `program` (affinity survives exec)."""
    env = dist_env.read()
    cpus = rank_cpus(env.local_rank, env.local_world_size, args.threads, physical_cores())
    if cpus is None:
        if env.local_rank == 0:
            print(f"pin: not pinned: {env.local_world_size} ranks x {args.threads} threads exceed this "
                  "node's cores", file=sys.stderr)
    else:
        os.sched_setaffinity(0, cpus)
        os.environ.setdefault("OMP_PLACES", "cores")
        os.environ.setdefault("OMP_PROC_BIND", "close")
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    os.execvp(program[0], program)


# ------------------------------------------------------------------ probe (on each node)

def interface_of(address: str) -> str | None:
    """The network interface holding an IPv4 address."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def route_source(address: str) -> str | None:
    """This node's own address on the way to `address` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            return sock.getsockname()[0]
    except OSError:
        return None


def gloo_ifname(master: str) -> str | None:
    """The interface this node reaches MASTER_ADDR through (on the first node:
    the one that holds it); gloo's GLOO_SOCKET_IFNAME."""
    source = route_source(master)
    if source is None or source.startswith("127."):
        return None
    return interface_of(source)


def probe(config: dict, master: str) -> dict:
    report = environment.describe(config, launcher=False)
    return {**report, "revision": revision(), "python_executable": sys.executable,
            "gloo_ifname": gloo_ifname(master)}


def probe_main(args) -> None:
    rank = dist_env.read().rank
    try:
        line = {"rank": rank, "report": probe(json.loads(args.config_json), args.master_addr)}
    except Exception as err:  # reported by name on the launch node, never a silent rank
        line = {"rank": rank, "host": socket.gethostname(), "error": f"{type(err).__name__}: {err}"}
    print("CPUDDP-NODE " + json.dumps(line), flush=True)


# ------------------------------------------------------------------ launching one rank per node

def run_bounded(argv: list[str], timeout: float, env=None) -> tuple[int | None, str, str]:
    """(exit code or None on timeout, stdout, stderr); the whole process group
    goes on timeout, so nothing is left waiting for a dead node."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):
            try:
                os.killpg(proc.pid, sig)
                out, err = proc.communicate(timeout=wait)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                out, err = "", ""
        return None, out or "", err or ""


def parse_reports(text: str, kind: str = "NODE") -> dict[int, dict]:
    """Reports by rank; the launcher may put two ranks' lines on one."""
    found, decoder, marker = {}, json.JSONDecoder(), f"CPUDDP-{kind} "
    for part in text.split(marker)[1:]:
        try:
            item, _ = decoder.raw_decode(part)
        except json.JSONDecodeError:
            continue  # cut by another rank's output: that rank counts as silent
        found[int(item["rank"])] = item
    return found


def per_node_argv(config: dict, hosts: list[str] | None, program: list[str], workdir, env: dict) -> list[str]:
    """One rank on each node, with the launcher (and its options) that trains."""
    dist = config["distributed"]
    extra = dist.get("launcher_args", [])
    if dist.get("launcher") == "srun":
        return launch.srun_argv(dist["nodes"], 1, 1, program, extra)
    mpi = launch.detect_mpi(dist["mpi"], dist.get("mpirun"))
    hostfile = launch.write_hostfile(mpi["flavour"], hosts, 1, workdir) if hosts else None
    return launch.mpirun_argv(mpi["flavour"], mpi["mpirun"], len(hosts) if hosts else 1, 1, env, program,
                              hostfile, extra)


def rank_environment(extra: dict | None = None) -> dict:
    return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "OMP_NUM_THREADS": "1", **(extra or {})}


def launch_per_node(config, hosts, program, timeout, env=None, kind="NODE") -> tuple[dict, int | None, str]:
    """Reports by rank, the launcher's exit code (None: timed out) and its stderr."""
    env = rank_environment(env)
    with tempfile.TemporaryDirectory(prefix="cpuddp-nodes-") as workdir:
        argv = per_node_argv(config, hosts, program, workdir, env)
        launcher_env = {**os.environ, **env} if config["distributed"].get("launcher") == "srun" else None
        code, out, err = run_bounded(argv, timeout, launcher_env)
    return parse_reports(out, kind), code, err


def tail(text: str, lines: int = 4) -> str:
    """The launcher's last telling lines (errors first, its advice dropped)."""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    telling = [line for line in kept if TELLING.search(line)]
    return " | ".join((telling or kept)[-lines:]) or "(nothing)"


def reach_each(config, hosts, program, timeout, env=None, kind="NODE") -> tuple[list[dict], list[str]]:
    """All nodes at once; when some do not answer, each of those alone (in
    parallel) to tell which node is at fault. Returns (reports, problems)."""
    names = hosts or [f"node {i}" for i in range(config["distributed"]["nodes"])]
    found, code, err = launch_per_node(config, hosts, program, timeout, env, kind)
    failures = {i: (code, err) for i in range(len(names)) if i not in found}
    if failures and hosts and len(hosts) > 1:
        def alone(i):
            return i, launch_per_node(config, [hosts[i]], program, timeout, env, kind)

        with concurrent.futures.ThreadPoolExecutor(len(failures)) as pool:
            for i, (one, one_code, one_err) in list(pool.map(alone, list(failures))):
                if 0 in one:
                    found[i] = {**one[0], "rank": i}
                    del failures[i]
                else:
                    failures[i] = (one_code, one_err)
    problems = [unreachable(names[i], timeout, *failures[i]) for i in sorted(failures)]
    return [found[i] for i in sorted(found)], problems


def unreachable(name: str, timeout: float, code: int | None, err: str) -> str:
    if code is None:
        return (f"node {name} did not answer within {timeout:g} s (down, unreachable, ssh asking for a "
                "password, or a firewall between the nodes); see README, Cluster troubleshooting")
    return f"node {name} did not answer (launcher exit code {code}): {tail(err)}"


# ------------------------------------------------------------------ the check

def disagreements(named: list[tuple[str, dict]]) -> list[str]:
    """Every way a node differs from the first: the node and both values."""
    (first, ref), problems = named[0], []
    for name, report in named[1:]:
        for key, label in AGREE.items():
            mine, theirs = report["versions"].get(key), ref["versions"].get(key)
            if mine != theirs:
                problems.append(f"node {name} has {label} {mine or 'not installed'} but node {first} has "
                                f"{label} {theirs or 'not installed'}")
        if report["revision"] != ref["revision"]:
            problems.append(f"node {name} has workflow revision {report['revision']} but node {first} has "
                            f"{ref['revision']} (a different copy of the workflow)")
        for key in DECISIONS:
            if report.get(key) != ref.get(key):
                problems.append(f"node {name} chose {key} {report.get(key)} ({report.get(key + '_reason')}) "
                                f"but node {first} chose {ref.get(key)}")
    return problems


def node_summary(name: str, report: dict) -> dict:
    keys = ("host", "versions", "revision", "cpu_model", "sockets", "physical_cores", "logical_cpus",
            "threads_per_process", "gloo_ifname", "python_executable")
    return {"node": name, **{k: report.get(k) for k in keys}}


def combine(config: dict, named: list[tuple[str, dict]], mpi: dict) -> dict:
    """environment.json: the first node's report, the launcher, every node."""
    first = dict(named[0][1])
    ifnames = {r.get("gloo_ifname") for _, r in named}
    first.update({
        "mpi": mpi,
        "revision": first["revision"],
        "threads_per_process": min(int(r["threads_per_process"]) for _, r in named),
        "gloo_ifname": ifnames.pop() if len(ifnames) == 1 else None,
        "node_reports": [node_summary(name, r) for name, r in named],
    })
    return first


def check(config: dict, timeout: float) -> dict:
    dist = config["distributed"]
    if not dist.get("hostfile") and dist["nodes"] == 1:
        report = {**environment.describe(config), "revision": revision(), "python_executable": sys.executable,
                  "gloo_ifname": None}
        return combine(config, [("localhost", report)], report["mpi"])
    mpi = launch.detect_launcher(dist)
    hosts = launch.check_nodes(dist["hostfile"], dist["nodes"]) if dist.get("hostfile") else None
    master = launch.master_addr(hosts) if hosts else "127.0.0.1"
    program = [sys.executable, "-m", "workflow.scripts.nodes.check", "probe", "--config-json",
               json.dumps(config, sort_keys=True), "--master-addr", master]
    reports, problems = reach_each(config, hosts, program, timeout)
    names = dict(enumerate(hosts)) if hosts else \
        {r["rank"]: r.get("report", r).get("host", f"node {r['rank']}") for r in reports}
    problems += [f"node {names[r['rank']]}: {r['error']}" for r in reports if "error" in r]
    if problems:
        raise UserError("environment check failed: " + "; ".join(problems))
    named = [(names[r["rank"]], r["report"]) for r in reports]
    problems = disagreements(named)
    if problems:
        raise UserError("nodes differ: " + "; ".join(problems) +
                        "; install the same versions everywhere (`snakemake ... setup_nodes` where nodes do not "
                        "share a filesystem)")
    return combine(config, named, mpi)


def check_main(args) -> None:
    config = json.loads(Path(args.config).read_text())
    info = check(config, config["distributed"].get("check_timeout_seconds", 120))
    for node in info["node_reports"]:
        print(f"node {node['node']} ({node['host']}): torch {node['versions']['torch']}, revision "
              f"{node['revision']}, {node['physical_cores']} cores", file=sys.stderr)
    print(f"backend {info['backend']} ({info['backend_reason']}); precision {info['precision']} "
          f"({info['precision_reason']}); {info['threads_per_process']} threads per process; "
          f"launcher {info['mpi']['flavour']} {info['mpi']['version']}", file=sys.stderr)
    write_json(args.out, info)


# ------------------------------------------------------------------ set-up of nodes without a shared filesystem

# Runs on each node with the system's python3 (stdlib only): fetch the
# workflow copy from the launch node, write what differs, then `make venv`.
BOOTSTRAP = r"""
import hashlib, io, json, os, subprocess, sys, tarfile, urllib.request
e = os.environ
rank = e.get("PMI_RANK") or e.get("OMPI_COMM_WORLD_RANK") or e.get("SLURM_PROCID") or "0"
root = e["CPUDDP_SETUP_ROOT"]
data = urllib.request.urlopen(e["CPUDDP_SETUP_URL"], timeout=120).read()
if hashlib.sha256(data).hexdigest() != e["CPUDDP_SETUP_SHA256"]:
    sys.exit("setup: the workflow copy arrived damaged")
written = 0
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    for member in tar.getmembers():
        target = os.path.join(root, member.name)
        content = tar.extractfile(member).read()
        try:
            with open(target, "rb") as handle:
                if handle.read() == content:
                    continue
        except OSError:
            pass
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target + ".cpuddp-tmp", "wb") as handle:
            handle.write(content)
        os.chmod(target + ".cpuddp-tmp", member.mode)
        os.replace(target + ".cpuddp-tmp", target)
        written += 1
make = subprocess.run(["make", "-C", root, "venv"], stdout=sys.stderr)
print("CPUDDP-SETUP " + json.dumps({"rank": int(rank), "written": written, "make": make.returncode}), flush=True)
"""


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


def setup(config: dict, timeout: float) -> list[dict]:
    dist = config["distributed"]
    hosts = launch.check_nodes(dist["hostfile"], dist["nodes"]) if dist.get("hostfile") else None
    if not hosts:
        raise UserError("setup_nodes needs distributed.hostfile (the nodes to set up)")
    master = launch.master_addr(hosts)
    address = master if launch.is_local_address(master) else route_source(master)
    data = workflow_archive()
    server, url = serve_once(data, address)
    env = {"CPUDDP_SETUP_URL": url, "CPUDDP_SETUP_ROOT": str(ROOT),
           "CPUDDP_SETUP_SHA256": hashlib.sha256(data).hexdigest()}
    try:
        reports, problems = reach_each(config, hosts, ["python3", "-c", BOOTSTRAP], timeout, env, kind="SETUP")
    finally:
        server.shutdown()
    problems += [f"node {hosts[r['rank']]}: `make venv` failed (exit code {r['make']})" for r in reports if r["make"]]
    if problems:
        raise UserError("setup_nodes failed: " + "; ".join(problems))
    return [{"node": hosts[r["rank"]], "files_written": r["written"]} for r in reports]


def setup_main(args) -> None:
    config = json.loads(Path(args.config).read_text())
    for node in setup(config, args.timeout):
        print(f"node {node['node']}: workflow copy in {ROOT} ({node['files_written']} files written), "
              ".venv ready", file=sys.stderr)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="check every node; write environment.json")
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("probe", help="(on each node) print this node's report")
    p.add_argument("--config-json", required=True)
    p.add_argument("--master-addr", required=True)
    p = sub.add_parser("pin", help="(each rank) bind to this rank's cores, then run PROGRAM")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("program", nargs=argparse.REMAINDER)
    p = sub.add_parser("setup", help="copy the workflow to every node and make its .venv")
    p.add_argument("--config", required=True)
    p.add_argument("--timeout", type=float, default=3600, help="seconds for the whole set-up")
    args = parser.parse_args(argv)
    {"check": check_main, "probe": probe_main, "pin": pin_main, "setup": setup_main}[args.command](args)


if __name__ == "__main__":
    run_cli(main)
