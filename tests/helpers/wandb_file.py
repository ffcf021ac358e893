"""Reading a W&B run file (run-<id>.wandb, as WANDB_MODE=offline leaves it):
a ':W&B' header, then LevelDB-log records (32 KiB blocks, each record cut
into chunks with a 7-byte header: crc32c, length, type) that hold
wandb's Record protobufs. wandb 0.31 ships no reader of its own."""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    found, pending, offset = [], b"", 7
    while offset + HEADER <= len(data):
        left = BLOCK - offset % BLOCK
        if left < HEADER:  # the block's tail is padding
            offset += left
            continue
        _, length, kind = struct.unpack("<IHB", data[offset:offset + HEADER])
        chunk = data[offset + HEADER:offset + HEADER + length]
        offset += HEADER + length
        if kind == FULL:
            found.append(chunk)
        elif kind in (FIRST, MIDDLE):
            pending = (b"" if kind == FIRST else pending) + chunk
        elif kind == LAST:
            found.append(pending + chunk)
        elif kind == 0 and length == 0:
            break
    return found


def history(path: Path) -> list[dict]:
    """Every logged row: {key: value} with _step."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for raw in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def config(path: Path) -> dict:
    """The run's config as its last config record holds it."""
    from wandb.proto import wandb_internal_pb2

    found = {}
    for raw in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else ()
        found.update({item.key: json.loads(item.value_json) for item in updates})
    return found
