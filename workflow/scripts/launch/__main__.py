"""Launch a step on every rank and wait for it (the training rule's launcher).

    python -m workflow.scripts.launch --config C --environment E --log-dir D -- PROGRAM...

The ranks' exit is bounded and judged by supervise.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workflow.scripts.common.errors import run_cli
from workflow.scripts.launch.job import run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="run configuration JSON")
    parser.add_argument("--environment", required=True, help="environment.json of the run")
    parser.add_argument("--log-dir", help="where the ranks write rank<N>.log / rank<N>.exit")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- command for every rank")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    config = json.loads(Path(args.config).read_text())
    info = json.loads(Path(args.environment).read_text())
    run(config, info, program, args.log_dir)


if __name__ == "__main__":
    run_cli(main)
