"""Rule logs (what `show-failed-logs` prints) hold no terminal escape codes,
even when the rule's stdout is a terminal, which is when transformers colours
its loading report."""

from __future__ import annotations

import io
import logging
import sys

from transformers.utils.loading_report import _style

from workflow.scripts.common import plain
from workflow.scripts.common.errors import run_cli


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_escape_codes_are_dropped_and_the_stream_is_no_terminal():
    out = io.StringIO()
    stream = plain.Plain(out)
    stream.write("\x1b[31mred\x1b[0m \x1b[2K\x1b[1Adone\x1bM")
    assert out.getvalue() == "red done" and not stream.isatty()


def test_a_steps_log_is_plain_while_stdout_is_a_terminal(tmp_path, monkeypatch):
    """A rule runs `python -m ... 2> {log}`: stderr is the log file, stdout
    the terminal; a handler made at import time (transformers') holds stderr."""
    for key, value in plain.QUIET_ENV.items():
        monkeypatch.setenv(key, value)
    terminal = Terminal()
    log = (tmp_path / "rule.log").open("w")
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setattr(sys, "stderr", log)
    logger = logging.getLogger("cpuddp-test-plain")
    handler = logging.StreamHandler(log)
    logger.addHandler(handler)

    def main(_argv):
        logger.warning("weights: " + _style("MISSING", "red") + " classifier.bias")
        print("\x1b[1mbold\x1b[0m and a bar\x1b[A", file=sys.stderr)
        print("on stdout: " + _style("UNEXPECTED", "orange"))

    try:
        run_cli(main)
    finally:
        logger.removeHandler(handler)
        log.close()
    text = (tmp_path / "rule.log").read_text()
    assert "weights: MISSING classifier.bias" in text and "bold and a bar" in text and "\x1b" not in text
    assert terminal.getvalue() == "on stdout: UNEXPECTED\n"


def test_a_terminal_keeps_its_colours(monkeypatch):
    """Run by hand in a terminal, a step is left alone."""
    monkeypatch.setattr(sys, "stderr", Terminal())
    plain.plain_when_logged({})
    assert not isinstance(sys.stderr, plain.Plain)
