"""The environment check of a run: every node reports (probe.py) through
the launcher that trains, and all must agree on Python, torch,
transformers, IPEX and oneCCL versions, the workflow revision and the
decisions. A node that does not answer within
distributed.check_timeout_seconds is named. Writes environment.json.

    python -m workflow.scripts.nodes.check --config C --out environment.json
    python -m workflow.scripts.nodes.check --config C --confirm environment.json --hosts a,b

With --confirm, the training's nodes that environment.json does not
describe are checked against it (`confirm`; the launcher runs this under
the training's lease, launch/lease.py).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from workflow.scripts.settings import step

from workflow.scripts.settings import layout
from workflow.scripts.probes import hardware
from workflow.scripts.common.atomic import write_json
from workflow.scripts.common.errors import UserError, stoppable
from workflow.scripts.settings.views import EnvironmentView
from workflow.scripts.launch import command, mpi
from workflow.scripts.nodes import describe
from workflow.scripts.launch import lease
from workflow.scripts.launch.reach import reach_each

AGREE = {"python": "Python", "torch": "torch", "transformers": "transformers",
         "intel_extension_for_pytorch": "IPEX", "oneccl_bind_pt": "oneCCL bindings"}
# Precision is not among them: combine() decides it once from every node's measurement.
DECISIONS = ("backend", "ipex")


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


def check(config: EnvironmentView, timeout: float, run: str | None = None,
          hosts: list[str] | None = None) -> dict:
    """environment.json of `run`'s nodes (`run`: its absolute results
    folder): those given, else those it leases (packed runs, profiles/xeon
    -j N: kept for the run's training, which then trains on exactly these;
    launch/lease.py), else the run's own."""
    dist = config.distributed
    if not dist.hostfile and dist.nodes == 1:
        return describe.environment_record(dist, config.train)
    if hosts is not None:
        return _check_on(config, mpi.detect_launcher(dist), hosts, timeout)
    with lease.held(dist, run or "environment check", "environment check",
                    keep_when="done" if run else "never") as leased:
        return _check_on(config, mpi.detect_launcher(dist), leased or command.run_hosts(dist), timeout)


def _check_on(config: EnvironmentView, launcher: dict, hosts: list[str] | None, timeout: float) -> dict:
    master = command.master_addr(hosts) if hosts else "127.0.0.1"
    program = [sys.executable, "-m", "workflow.scripts.nodes.probe", "--config-json",
               json.dumps(config.as_dict(), sort_keys=True), "--master-addr", master]
    reports, problems = reach_each(config.distributed, launcher, hosts, program, timeout)
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
    return describe.combine(config.distributed, config.train, named, launcher)


# What training takes from environment.json and nodes it did not check must match.
SAME = ("backend", "ipex", "precision", "threads_per_process")


def differences(info: dict, fresh: dict, where: str, revision: str) -> list[str]:
    """How the record of nodes checked now differs from environment.json, one
    clause each. Their code is held to this launch node's now (`revision`):
    environment.json's may predate an edit that every node sees alike."""
    problems = [f"{label} {fresh['versions'].get(key) or 'not installed'} on {where} but "
                f"{info['versions'].get(key) or 'not installed'} in environment.json"
                for key, label in AGREE.items() if fresh["versions"].get(key) != info["versions"].get(key)]
    if fresh.get("revision") != revision:
        problems.append(f"workflow revision {fresh.get('revision')} on {where} but {revision} on this launch node")
    return problems + [f"{key} {fresh.get(key)} on {where} but {info.get(key)} in environment.json"
                       for key in SAME if fresh.get(key) != info.get(key)]


def confirm(view: EnvironmentView, info: dict, hosts: list[str] | None) -> list[str]:
    """The training's hosts that environment.json's check did not see (its
    reservation was taken between check and training, launch/lease.py),
    checked now under the training's lease; the try fails in one line when
    they differ from environment.json. [] when the check saw them all."""
    seen = [n["node"] for n in info.get("node_reports", [])]
    new = [h for h in hosts or [] if h not in seen]
    if not new:
        return []
    view = dataclasses.replace(view, distributed=dataclasses.replace(
        view.distributed, threads_per_process=info["threads_per_process"],
        processes_per_node=info.get("processes_per_node", view.distributed.processes_per_node)))
    fresh = check(view, view.distributed.check_timeout_seconds, hosts=new)
    problems = differences(info, fresh, ", ".join(new), describe.revision())
    if problems:
        raise UserError(f"this try's nodes {', '.join(new)} are not those environment.json describes "
                        f"({', '.join(seen)}) and differ: {'; '.join(problems)}; rerun the environment check "
                        f"(delete environment.json)")
    print(f"environment: {', '.join(new)} checked now (environment.json describes {', '.join(seen)}); they agree",
          file=sys.stderr, flush=True)
    return new


def layout_record(chosen: layout.Layout, record: dict | None, info: dict) -> dict:
    """environment.json's `layout` (how the ranks x threads were chosen, and
    the measured table) and `layout_reason` (one line). On several nodes the
    launch node measured it: a node of another CPU model is named."""
    models = {n["node"]: n.get("cpu_model") for n in info.get("node_reports", [])}
    figures = {k: record[k] for k in ("cpu_model", "cores", "shape", "warmup_steps", "steps", "timing", "table",
                                      "dropped", "best", "fallback", "cached", "cache_file", "measured_at")
               if k in record} if record and chosen.source in ("measured", "cached", "fallback") else {}
    # A measured layout's per-rank batch and accumulation: the run's global batch is the layout's to keep.
    split = {"batch_size_per_rank": chosen.batch_size,
             "gradient_accumulation_steps": chosen.gradient_accumulation_steps} if chosen.batch_size else {}
    return {"layout": {"source": chosen.source, **figures}, **split,
            "layout_reason": chosen.reason + (layout.nodes_note(record, models) if figures else "")}


def main(argv=None) -> None:
    with stoppable():  # a SIGTERM or SIGINT while the nodes answer gives back the lease (errors.Stopped)
        environment_check(argv)


def environment_check(argv=None) -> None:
    parser = step.parser(__doc__)
    parser.add_argument("--layout", help="the run's measured layout.json (processes_per_node auto; train/tune.py)")
    parser.add_argument("--out", help="environment.json to write")
    parser.add_argument("--confirm", metavar="ENVIRONMENT", help="environment.json the --hosts must agree with")
    parser.add_argument("--hosts", help="with --confirm: the training's nodes, comma-separated")
    args = parser.parse_args(argv)
    if not (args.out or args.confirm and args.hosts):
        parser.error("give --out, or --confirm with --hosts")
    config = step.read_config(args)
    if args.confirm:
        confirm(EnvironmentView.pick(config), json.loads(Path(args.confirm).read_text()), args.hosts.split(","))
        return
    record = json.loads(Path(args.layout).read_text()) if args.layout else None
    view = EnvironmentView.pick(config)
    chosen = layout.decide(view.distributed, record, hardware.usable_cores(hardware.cpu_summary()))
    view = dataclasses.replace(view, distributed=dataclasses.replace(  # the layout a number from here on
        view.distributed, processes_per_node=chosen.processes_per_node, threads_per_process=chosen.threads_per_process))
    info = check(view, view.distributed.check_timeout_seconds, run=str(Path(args.out).resolve().parent))
    info.update(layout_record(chosen, record, info))
    for node in info["node_reports"]:
        print(f"node {node['node']} ({node['host']}): torch {node['versions']['torch']}, revision "
              f"{node['revision']}, {node['physical_cores']} cores; {node['low_precision']['implies']}",
              file=sys.stderr)
    print(f"layout {info['processes_per_node']} rank(s) x {info['threads_per_process']} thread(s) per node: "
          f"{info['layout_reason']}", file=sys.stderr)
    print(f"backend {info['backend']} ({info['backend_reason']}); precision {info['precision']} "
          f"({info['precision_reason']}); {info['threads_per_process']} threads per process; "
          f"launcher {info['mpi']['flavour']} {info['mpi']['version']}", file=sys.stderr)
    if info.get("ccl_env"):
        tuning = " ".join(f"{k}={v}" for k, v in info["ccl_env"].items() if k.startswith(("CCL_", "FI_", "I_MPI_HY"))
                          and k not in ("CCL_ROOT", "FI_PROVIDER_PATH"))
        print(f"ccl ranks get {tuning}; replaced by distributed.env: "
              f"{', '.join(info['ccl_env_overridden']) or 'nothing'}", file=sys.stderr)
    write_json(args.out, info)


if __name__ == "__main__":
    step.entry(main)
