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


def run(log: Path, command: list[str]) -> int:
    """Run `command` with the recorder on; print its wall and its process tree's CPU."""
    log.unlink(missing_ok=True)
    recorder = str(Path(__file__).resolve().parent / "cpu_by_test")
    path = os.pathsep.join(filter(None, [recorder, os.environ.get("PYTHONPATH")]))
    start = time.monotonic()
    code = subprocess.call(command, env={**os.environ, "PYTHONPATH": path, "CPUDDP_CPU_LOG": str(log.resolve())})
    tree = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{' '.join(command)}: exit {code}, {time.monotonic() - start:.0f} s wall, "
          f"{tree.ru_utime + tree.ru_stime:.0f} CPU s in its process tree")
    return code


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
    return code


if __name__ == "__main__":
    sys.exit(main())
