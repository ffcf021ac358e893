"""Where a test lane's CPU goes: `make cpu-by-test [LANE_TO_PROFILE=test-integration]`.

    python mk/cpu_by_test.py [--tests N] LOG -- COMMAND...   run COMMAND with the recorder, then the tables
    python mk/cpu_by_test.py [--tests N] LOG                 the tables of a LOG recorded before

COMMAND runs with mk/cpu_by_test/ on PYTHONPATH and CPUDDP_CPU_LOG=LOG, so
every Python process it starts writes a line as it exits (sitecustomize.py
there). The tables: the lane's wall time and the CPU of its whole process tree
(what COMMAND's children used, daemons aside), then the recorded processes'
CPU by kind (a step, a rank, Snakemake, a test worker) and by test. A few
tests set a PYTHONPATH of their own: their processes are not recorded, and
show as the gap between the tree's CPU and the recorded total.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path


def kind(argv: list[str]) -> str:
    """'train.rank', 'infer.evaluate', 'snakemake', ...: what the process was, from its
    program alone (argv[0]; its arguments name test folders such as /tmp/pytest-of-...)."""
    if not argv:
        return "?"
    if argv[0] == "-c":
        return "python -c (test workers, helpers' ranks)"
    program = Path(argv[0])
    if "workflow/scripts/" in argv[0]:  # python -m workflow.scripts.X puts the module's path in argv[0]
        module = argv[0].split("workflow/scripts/", 1)[1].removesuffix(".py").removesuffix("/__main__")
        return module.replace("/", ".")
    for name in ("snakemake", "pytest"):  # bin/snakemake, or python -m X: X/__main__.py
        if program.name == name or name in program.parts:
            return name
    return program.name


def test_name(current: str) -> str:
    """'test_x.py::test_y[param]' from PYTEST_CURRENT_TEST (its path, '::', the test, ' (call)')."""
    if not current:
        return "(outside a test: fixtures, workers)"
    path, _, test = current.rsplit(" (", 1)[0].partition("::")
    return f"{Path(path).name}::{test}"


def table(lines: list[dict], key) -> list[tuple[str, int, float, int]]:
    """(name, processes, CPU s, processes that loaded torch._dynamo), most CPU first."""
    rows = collections.defaultdict(lambda: [0, 0.0, 0])
    for line in lines:
        row = rows[key(line)]
        row[0] += 1
        row[1] += line["cpu"]
        row[2] += line["torch._dynamo"]
    return sorted(((name, n, cpu, dynamo) for name, (n, cpu, dynamo) in rows.items()), key=lambda r: -r[2])


def busy_log(log: Path) -> Path:
    return log.with_name(log.name + ".busy")


def cpu_ticks() -> tuple[int, int]:
    """(busy, all) jiffies of every core since boot, from /proc/stat's first line."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def sample_busy(out: Path, stop: threading.Event, every: float = 1.0) -> None:
    """Every second, the machine's busy cores then (a line: time, busy cores): the idle
    a lane leaves shows where its time is waiting rather than work."""
    cores = os.cpu_count() or 1
    before = cpu_ticks()
    with open(out, "w") as lines:
        while not stop.wait(every):
            now = cpu_ticks()
            share = (now[0] - before[0]) / max(now[1] - before[1], 1)
            lines.write(f"{time.time():.1f} {share * cores:.2f}\n")
            before = now


def run(log: Path, command: list[str]) -> int:
    """Run `command` with the recorder on; print its wall and its process tree's CPU."""
    log.unlink(missing_ok=True)
    recorder = str(Path(__file__).resolve().parent / "cpu_by_test")
    path = os.pathsep.join(filter(None, [recorder, os.environ.get("PYTHONPATH")]))
    start = time.monotonic()
    stop = threading.Event()
    sampler = threading.Thread(target=sample_busy, args=(busy_log(log), stop), daemon=True)
    sampler.start()
    code = subprocess.call(command, env={**os.environ, "PYTHONPATH": path, "CPUDDP_CPU_LOG": str(log.resolve())})
    stop.set()
    sampler.join()
    tree = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{' '.join(command)}: exit {code}, {time.monotonic() - start:.0f} s wall, "
          f"{tree.ru_utime + tree.ru_stime:.0f} CPU s in its process tree")
    return code


def timeline(lines: list[dict], busy: list[tuple[float, float]], minute: float = 60.0) -> list[tuple]:
    """(minute, busy cores on average, the tests with a recorded process alive in it, most
    seconds alive first): which tests were running when the cores sat idle."""
    if not busy:
        return []
    origin, rows = busy[0][0], []
    for index in range(int((busy[-1][0] - origin) // minute) + 1):
        begin, end = origin + index * minute, origin + (index + 1) * minute
        shares = [cores for t, cores in busy if begin <= t < end]
        alive = collections.Counter()
        for line in lines:
            overlap = min(end, line.get("end", 0)) - max(begin, line.get("start", 0))
            if overlap > 0:
                alive[test_name(line["test"])] += overlap
        rows.append((index, sum(shares) / max(len(shares), 1), [name for name, _ in alive.most_common(4)]))
    return rows


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--tests", type=int, default=25, help="how many of the costliest tests to list")
    args = parser.parse_args(argv[:argv.index("--")] if command else argv)
    code = run(args.log, command) if command else 0
    text = args.log.read_text() if args.log.exists() else ""  # no Python process recorded
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    total = sum(line["cpu"] for line in lines)
    print(f"{len(lines)} Python processes, {total:.0f} CPU s in all")
    print(f"{'CPU s':>7} {'procs':>5} {'s each':>6} {'dynamo':>6}  kind")
    for name, n, cpu, dynamo in table(lines, lambda line: kind(line["argv"])):
        print(f"{cpu:7.0f} {n:5d} {cpu / n:6.2f} {dynamo:6d}  {name}")
    print(f"\n{'CPU s':>7} {'procs':>5}  test (the {args.tests} costliest)")
    for name, n, cpu, _ in table(lines, lambda line: test_name(line["test"]))[:args.tests]:
        print(f"{cpu:7.0f} {n:5d}  {name}")
    busy_file = busy_log(args.log)
    busy = [tuple(map(float, row.split())) for row in busy_file.read_text().splitlines()] if busy_file.exists() else []
    if busy:
        print(f"\nminute  busy cores of {os.cpu_count()}  tests with a process alive then (longest alive first)")
    for index, cores, names in timeline(lines, busy):
        print(f"{index:6d}  {cores:4.2f}  {', '.join(names)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
