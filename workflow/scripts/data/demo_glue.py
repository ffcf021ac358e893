"""A demo GLUE archive for the accuracy table: MRPC, RTE and STS-B in their
original folders and TSV layouts (`MRPC/train.tsv`, `RTE/dev.tsv`,
`STS-B/...`), made from the demo's MRPC sentence pairs, so that a task sweep
with `data.glue_dir` runs offline. RTE labels a paraphrase `entailment`;
STS-B scores it 3.5-5 and the others 0-2.5 (seeded, reproducible).
"""

from __future__ import annotations

import csv
import random
import tempfile
from pathlib import Path

from workflow.scripts.common.tasks import GLUE_ARCHIVE_FOLDERS
from workflow.scripts.data.demo_mrpc import write_mrpc_demo

DEMO_TASKS = ("mrpc", "rte", "stsb")


def _pairs(path: Path) -> list[tuple[int, str, str]]:
    """(label, sentence 1, sentence 2) of an MRPC demo file."""
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [(int(r[0]), r[3], r[4]) for r in rows]


def _rte(pairs, rng) -> str:
    lines = ["index\tsentence1\tsentence2\tlabel"]
    lines += [f"{i}\t{a}\t{b}\t{'entailment' if y else 'not_entailment'}" for i, (y, a, b) in enumerate(pairs)]
    return "\n".join(lines) + "\n"


def _stsb(pairs, rng) -> str:
    lines = ["index\tsentence1\tsentence2\tscore"]
    for i, (y, a, b) in enumerate(pairs):
        score = rng.uniform(3.5, 5.0) if y else rng.uniform(0.0, 2.5)
        lines.append(f"{i}\t{a}\t{b}\t{score:.3f}")
    return "\n".join(lines) + "\n"


def write_glue_demo(out_dir, tasks=DEMO_TASKS, n_train: int = 1600, n_dev: int = 400, seed: int = 0) -> list[Path]:
    """Write the demo archive's folders of `tasks` under out_dir; returns the files."""
    unknown = [t for t in tasks if t not in DEMO_TASKS]
    if unknown:
        raise ValueError(f"no demo data for {', '.join(unknown)}: the demo archive has {', '.join(DEMO_TASKS)}")
    out, rng, written = Path(out_dir), random.Random(f"glue-{seed}"), []
    with tempfile.TemporaryDirectory() as tmp:
        write_mrpc_demo(tmp, n_train, n_dev, seed)
        for task in tasks:
            folder = out / GLUE_ARCHIVE_FOLDERS[task]
            folder.mkdir(parents=True, exist_ok=True)
            for name in ("train.tsv", "dev.tsv"):
                source = Path(tmp) / name
                text = source.read_text(encoding="utf-8") if task == "mrpc" else \
                    {"rte": _rte, "stsb": _stsb}[task](_pairs(source), rng)
                (folder / name).write_text(text, encoding="utf-8", newline="\n")
                written.append(folder / name)
    return written
