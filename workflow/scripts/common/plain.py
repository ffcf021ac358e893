"""Rule logs without terminal escape codes.

A rule sends a step's stderr to its log (`2> {log}`) while stdout stays on
the terminal, and libraries colour by whether a stream is a terminal
(transformers' loading report asks `sys.stdout.isatty()`), so the log got
their ANSI codes. When stderr is a file, both streams are wrapped: they say
they are no terminal and drop escape sequences, and the logging handlers that
already hold stderr (transformers' own) write through the wrapper."""

from __future__ import annotations

import logging
import os
import re
import sys

# CSI sequences (colours, cursor moves: ESC [ ... final byte) and the
# two-byte ones (ESC followed by one of @-Z \ ] ^ _).
ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# Libraries that read these leave colours and progress bars out of child processes too.
QUIET_ENV = {"NO_COLOR": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def strip(text: str) -> str:
    return ESCAPE.sub("", text)


class Plain:
    """A text stream that writes without escape codes and is no terminal."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(strip(text))
        return len(text)

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _retarget_handlers(old, new) -> None:
    loggers = [logging.getLogger()] + [found for found in logging.Logger.manager.loggerDict.values()
                                       if isinstance(found, logging.Logger)]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is old:
                handler.setStream(new)


def plain_when_logged(environ=os.environ) -> None:
    """Wrap stdout and stderr when stderr goes to a file (a rule's log)."""
    err = sys.stderr
    if err is None or isinstance(err, Plain) or err.isatty():
        return
    for key, value in QUIET_ENV.items():
        environ.setdefault(key, value)
    sys.stderr = Plain(err)
    _retarget_handlers(err, sys.stderr)
    if sys.stdout is not None and not isinstance(sys.stdout, Plain):
        sys.stdout = Plain(sys.stdout)
