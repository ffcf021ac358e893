"""A saved split read straight from the Arrow files that datasets'
save_to_disk wrote (data/load.py, data/tokenize.py), for every step that
only reads one: the training ranks, scoring (evaluation during training,
evaluate_fp32) and the infer steps (convert, int8, runtimes).

They need of a split only its rows, columns, token lengths and label names.
Importing datasets for that (it imports pandas) costs a process about 2
CPU-seconds at start-up, a third of a rank's, and every rank of every try
pays it. The files are memory-mapped, as datasets does, so the ranks of a
node share one copy in the page cache.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc


class ArrowSplit:
    """One split: `len`, `split[i]` (a row as a dict of Python values, as
    datasets gives it with no format), `split[column]` (a list), rows by
    the list (`__getitems__`, what DataLoader asks for), `column_names`,
    `features` (label names: ClassLabel-like objects with `.names`)."""

    def __init__(self, table: pa.Table, features: dict):
        self.table, self.features = table, features

    @classmethod
    def load(cls, data_dir: str | Path, split: str = "train") -> ArrowSplit:
        folder = Path(data_dir) / split
        try:
            state = json.loads((folder / "state.json").read_text())
            info = json.loads((folder / "dataset_info.json").read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no split {split!r} saved in {data_dir}: "
                                    "run the step that writes it again") from None
        tables = [_read(folder / f["filename"]) for f in state["_data_files"]]
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        return cls(table, {name: _feature(spec) for name, spec in info.get("features", {}).items()})

    @property
    def column_names(self) -> list[str]:
        return self.table.column_names

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.table.column(key).to_pylist()
        return self.table.slice(key, 1).to_pylist()[0]

    def __getitems__(self, indices: list[int]) -> list[dict]:
        return self.table.take(indices).to_pylist()

    def __iter__(self):
        for batch in self.table.to_batches(max_chunksize=1024):
            yield from batch.to_pylist()

    def lengths(self, column: str = "input_ids") -> list[int]:
        """Each row's token count, without building its tokens as Python lists."""
        return pc.list_value_length(self.table.column(column)).to_pylist()

    def select(self, indices) -> ArrowSplit:
        """These rows, in this order."""
        return ArrowSplit(self.table.take(list(indices)), self.features)

    def select_columns(self, names) -> ArrowSplit:
        names = list(names)
        return ArrowSplit(self.table.select(names), {k: v for k, v in self.features.items() if k in names})


def load_splits(data_dir: str | Path) -> dict[str, ArrowSplit]:
    """Every split of a saved DatasetDict, by name."""
    try:
        names = json.loads((Path(data_dir) / "dataset_dict.json").read_text())["splits"]
    except FileNotFoundError:
        raise FileNotFoundError(f"no saved splits in {data_dir}: run the step that writes it again") from None
    return {name: ArrowSplit.load(data_dir, name) for name in names}


def _read(path: Path) -> pa.Table:
    # save_to_disk writes the IPC stream format; a memory map reads it without a copy.
    return pa.ipc.open_stream(pa.memory_map(str(path))).read_all()


def _feature(spec):
    """A feature as far as the ranks use it: a class label's names, or the
    feature of a list (a multi-label column is a list of class labels)."""
    if not isinstance(spec, dict):
        return spec
    if "names" in spec:
        return SimpleNamespace(names=list(spec["names"]))
    if "feature" in spec:
        return SimpleNamespace(feature=_feature(spec["feature"]))
    return SimpleNamespace()
