"""Launch a step on every rank and wait for it (the training rule's launcher).

    python -m workflow.scripts.launch --config C --environment E --log-dir D \
        [--try N --tries tries.json] -- PROGRAM...

The ranks' exit is bounded and judged (supervise.py, verdict.py). On a
retry (N > 1) the nodes that answer are chosen first (hosts.py), and each
try is recorded for summary.json (tries.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workflow.scripts.common import step
from workflow.scripts.common.views import TrainView
from workflow.scripts.launch import hosts, job, lease, tries
from workflow.scripts.nodes import check


def main(argv=None) -> None:
    parser = step.parser(__doc__)
    parser.add_argument("--environment", required=True, help="environment.json of the run")
    parser.add_argument("--log-dir", help="where the ranks write rank<N>.log / rank<N>.exit")
    parser.add_argument("--try", dest="attempt", type=int, default=1, help="which try of the job this is")
    parser.add_argument("--tries", help="JSON list of the tries, appended to")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- command for every rank")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    config = step.read_view(args, TrainView)
    info = json.loads(Path(args.environment).read_text())
    # Packed runs (profiles/xeon, -j N): the nodes of the run's environment
    # check, or others checked now (launch/lease.py); kept for a next try.
    run = str(Path(args.environment).resolve().parent)
    with lease.held(config, run, "training", keep_when="failed") as leased:
        if not args.tries:
            check.confirm(config, info, leased)
            job.run(config, info, program, args.log_dir, hosts=leased)
            return
        with tries.recorded(args.tries, args.attempt, args.log_dir, {}) as entry:
            chosen, dropped = hosts.for_retry(config, leased) if args.attempt > 1 else (None, [])
            entry.update(hosts=chosen or leased, dropped=dropped)
            entry.update(checked_now=check.confirm(config, info, chosen or leased))
            job.run(config, info, program, args.log_dir, hosts=chosen or leased)


if __name__ == "__main__":
    step.entry(main)
