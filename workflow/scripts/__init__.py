"""cpuddp's steps, one sub-package per stage (docs/architecture.md).

Every step, rank and launcher starts as `python -m workflow.scripts...`, and
this file runs first. Loading torch and transformers creates about a
million objects, over which the garbage collector's default thresholds run
full collections again and again while they load: about 0.9 of the 5-6
CPU-s it takes to import transformers' models here (2026-11-29). So a
program started this way loads its modules with the collector off, and
`program_loaded()` (run_cli calls it before main) turns it back on, the
loaded modules' objects frozen out of later collections: they live as long
as the process. transformers' own import machinery is left as it is: nothing
here wraps a function of a dependency (docs/architecture.md)."""

import gc
import sys

if sys.argv[:1] == ["-m"]:  # started with -m: argv[0] is "-m" only while Python looks for the module
    gc.disable()


def program_loaded() -> None:
    """The program's modules are loaded: collect garbage from here on."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
