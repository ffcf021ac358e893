"""Reading the demo generator's files back: GLUE TSV rows, SQuAD questions."""

from __future__ import annotations

import csv
import json
from pathlib import Path


def read_tsv(path):
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def questions(path):
    for article in json.loads(Path(path).read_text(encoding="utf-8"))["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                yield para["context"], qa
