"""The shared entry of every step: its arguments, the files every step reads
(the stage's configuration slice, the run decisions), and `run_cli`, so that
a failure ends in one line and a non-zero exit."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from typing import TypeVar

from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.common.errors import run_cli

V = TypeVar("V")


def parser(doc: str | None, config: bool = True, environment: bool = False) -> argparse.ArgumentParser:
    """An argument parser with the step's usual --config and --environment."""
    parsed = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if config:
        parsed.add_argument("--config", required=True, help="the stage's configuration JSON")
    if environment:
        parsed.add_argument("--environment", required=True, help="environment.json of the run")
    return parsed


def read_config(args) -> dict:
    """The whole configuration as a mapping (report, plan and the launcher,
    which read more than one stage's slice)."""
    return json.loads(Path(args.config).read_text())


def read_view(args, view: type[V]) -> V:
    """The stage's configuration slice as its typed view (settings/views.py).
    A whole configuration works too (tests and benches pass one): the view
    takes its part; inside a section every key must be known."""
    return view.pick(read_config(args))


def read_decisions(args) -> RunDecisions:
    return RunDecisions.load(args.environment)


def entry(main) -> None:
    """`if __name__ == "__main__": step.entry(main)`."""
    run_cli(main)
