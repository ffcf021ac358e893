"""Deterministic demo datasets in the original GLUE MRPC and SQuAD file formats.

Everything is generated from ``random.Random`` instances seeded from the
arguments (never the global RNG), so the same arguments give byte-identical
files.  Usage::

    python -m workflow.scripts.data.demo --task mrpc --out DIR [--train N] [--dev N] [--seed S]
    python -m workflow.scripts.data.demo --task squad|squad_v2 --out DIR ...
    python -m workflow.scripts.data.demo --task classification --out DIR ...
    python -m workflow.scripts.data.demo --task glue --tasks mrpc,rte,stsb --out DIR ...

MRPC: ``DIR/train.tsv`` and ``DIR/dev.tsv`` (label 1 = paraphrase, ~2/3 positive).
SQuAD: ``DIR/train-v1.1.json`` / ``DIR/dev-v1.1.json`` (v2: ``*-v2.0.json`` with
about a third of the questions unanswerable). classification: ``DIR/train.csv``
and ``DIR/dev.csv``, 4-class news (labels 1-4, AG News' shape; ``demo_news``).
glue: a GLUE archive folder (``DIR/MRPC``, ``DIR/RTE``, ``DIR/STS-B``; ``demo_glue``).

The generators live in ``demo_mrpc`` and ``demo_squad``, their words in
``demo_vocabulary.json``; this module is the entry point and re-exports both.
"""

from __future__ import annotations

import argparse

from workflow.scripts.data.demo_glue import write_glue_demo
from workflow.scripts.data.demo_mrpc import write_mrpc_demo
from workflow.scripts.data.demo_news import write_news_demo
from workflow.scripts.data.demo_squad import write_squad_demo

__all__ = ["main", "write_mrpc_demo", "write_news_demo", "write_squad_demo"]


def main(argv=None) -> None:
    """Write the demo files of one task and print their paths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, choices=["mrpc", "squad", "squad_v2", "classification", "glue"])
    parser.add_argument("--tasks", default="mrpc,rte,stsb", help="glue: the archive's tasks")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--train", type=int, help="train examples (mrpc 1600, squad 1200 questions)")
    parser.add_argument("--dev", type=int, help="dev examples (mrpc 400, squad 300 questions)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.task == "mrpc":
        paths = write_mrpc_demo(args.out, args.train or 1600, args.dev or 400, args.seed)
    elif args.task == "glue":
        paths = write_glue_demo(args.out, args.tasks.split(","), args.train or 1600, args.dev or 400, args.seed)
    elif args.task == "classification":
        paths = write_news_demo(args.out, args.train or 1600, args.dev or 400, args.seed)
    else:
        paths = write_squad_demo(args.out, args.train or 1200, args.dev or 300, args.seed,
                                 version_2=args.task == "squad_v2")
    for path in paths:
        print(path)


if __name__ == "__main__":
    from workflow.scripts import program_loaded

    program_loaded()
    main()
