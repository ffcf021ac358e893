"""Batches for DDP: length-grouped, shuffled, equal steps on every rank.

A transformers model takes each batch padded to its longest sequence
(pad_collate), which wastes little when a batch holds sequences of similar
length; cpuddp's encoder takes it packed, real tokens only (packed_collate).
Grouping is done per global batch (all ranks' micro-batches together), so
ranks finish their steps at about the same time and the all-reduce does not
wait on a straggler with long inputs.

The global batches (which samples update k trains on) depend only on the
data, the seed, the epoch and the global batch size, never on how it is
split into ranks x accumulation steps: a run can continue on fewer ranks
with more accumulation and train on exactly the same updates.
"""

from __future__ import annotations

import math

import numpy as np
import torch

PAD_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class DistributedLengthGroupedSampler(torch.utils.data.Sampler):
    """Yields this rank's micro-batches (lists of indices) for one epoch,
    `accumulation` of them per update.

    Each epoch: a seeded permutation, cut into mega-batches of
    `group` global batches, each sorted by length (randomly scaled by up to
    +-`jitter`, so batch composition changes between epochs) and cut into
    global batches of batch_size x world_size x accumulation, whose order is
    shuffled again. The last global batch is filled by wrapping around, as
    DistributedSampler pads, so all ranks take the same number of steps.
    A global batch is cut into `accumulation` groups of adjacent (similar)
    lengths, longest first, one per micro-step; each group is dealt to the
    ranks in snake order (0, 1, .., W-1, W-1, .., 1, 0, 0, 1, ..), so the
    ranks of one micro-step get similar lengths and about the same tokens.
    Cut into contiguous slices, rank 0 always took the longest: on SST-2's
    lengths at 2 x 32 it held 5% more tokens than rank 1 in every update,
    and every update waits for the slowest rank (more so with more ranks).

    With `sample` (train.sample_updates), an epoch is `warmup` of its first
    global batches, then `sample` of the rest, one at each of `sample`
    evenly spaced quantiles of their real tokens (in the epoch's order):
    a short run whose steps after the warm-up cost what the epoch's cost on
    average (train/tune.py's bursts). The first batches are a random draw:
    12 of SST-2's ran 350-360 samples/s where its epoch ran 265-300.
    """

    def __init__(self, lengths, batch_size: int, rank: int, world_size: int, seed: int = 0, group: int = 50,
                 group_by_length: bool = True, jitter: float = 0.1, accumulation: int = 1,
                 sample: int | None = None, warmup: int = 0):
        self.lengths = np.asarray(lengths)
        self.batch_size, self.rank, self.world_size = batch_size, rank, world_size
        self.accumulation, self.sample, self.warmup = accumulation, sample, warmup
        self.seed, self.group, self.group_by_length, self.jitter = seed, group, group_by_length, jitter
        self.epoch, self.start = 0, 0

    @property
    def global_size(self) -> int:
        return self.batch_size * self.world_size * self.accumulation

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Epoch `epoch`'s order, from its update `start` on (a resumed run
        skips the batches it already trained without collating them)."""
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        """Updates per epoch."""
        return min(self.whole_epoch(), self.warmup + self.sample) if self.sample else self.whole_epoch()

    def whole_epoch(self) -> int:
        return math.ceil(len(self.lengths) / self.global_size)

    def global_batches(self) -> list[np.ndarray]:
        batches = self.epoch_batches()
        return sampled(batches, self.lengths, self.warmup, self.sample) if self.sample else batches

    def epoch_batches(self) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        padded = self.whole_epoch() * self.global_size
        order = np.resize(order, padded)  # wrap around, as often as needed
        if self.group_by_length:
            mega = self.global_size * self.group
            chunks = [order[i:i + mega] for i in range(0, len(order), mega)]
            # Lengths jittered by +-jitter: batches still hold similar lengths,
            # but not the same neighbours every epoch (a fixed sort cost up to
            # 3.5 points of dev accuracy on MRPC-shaped data, see README).
            keys = self.lengths * rng.uniform(1 - self.jitter, 1 + self.jitter, size=len(self.lengths))
            order = np.concatenate([c[np.argsort(-keys[c], kind="stable")] for c in chunks])
        batches = [order[i:i + self.global_size] for i in range(0, padded, self.global_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self):
        mine = snake_positions(self.world_size, self.batch_size, self.rank)
        group = self.world_size * self.batch_size
        for batch in self.global_batches()[self.start:]:
            for micro in range(self.accumulation):
                yield batch[micro * group:(micro + 1) * group][mine].tolist()


def sampled(batches: list[np.ndarray], lengths: np.ndarray, warmup: int, sample: int) -> list[np.ndarray]:
    """The first `warmup` batches, then of the rest the one at each of
    `sample` evenly spaced quantiles of their real tokens, in their order."""
    if warmup + sample >= len(batches):
        return batches
    rest = batches[warmup:]
    by_tokens = np.argsort([int(lengths[b].sum()) for b in rest], kind="stable")
    picked = sorted(by_tokens[int((i + 0.5) * len(rest) / sample)] for i in range(sample))
    return batches[:warmup] + [rest[i] for i in picked]


def snake_positions(world: int, batch_size: int, rank: int) -> np.ndarray:
    """The positions rank `rank` takes of a group of world x batch_size
    samples dealt in snake order: round k goes 0 .. W-1 when k is even,
    W-1 .. 0 when odd, so each rank takes one of every W adjacent samples
    and the longest and shortest of neighbouring rounds even out."""
    position = np.arange(world * batch_size)
    rounds, seat = np.divmod(position, world)
    dealt_to = np.where(rounds % 2 == 0, seat, world - 1 - seat)
    return position[dealt_to == rank]


def updates(micro_batches, accumulation: int):
    """Group an iterator of micro-batches into lists of `accumulation`."""
    group = []
    for batch in micro_batches:
        group.append(batch)
        if len(group) == accumulation:
            yield group
            group = []


def row_field(rows: list[dict], key: str, num_labels: int | None) -> torch.Tensor:
    """A field with one value per row (labels, QA positions) as a tensor;
    multi-label rows (lists of label ids) as multi-hot float rows."""
    if key == "labels" and num_labels and isinstance(rows[0][key], list):
        return multi_hot([r[key] for r in rows], num_labels)
    return torch.tensor([r[key] for r in rows])


def pad_collate(pad_token_id: int, num_labels: int | None = None):
    """Collate dict rows into tensors, padding token fields to the batch max;
    multi-label rows (lists of label ids) become multi-hot float rows."""
    def collate(rows: list[dict]) -> dict:
        longest = max(len(r["input_ids"]) for r in rows)
        batch = {}
        for key in rows[0]:
            if key in PAD_KEYS:
                fill = pad_token_id if key == "input_ids" else 0
                out = np.full((len(rows), longest), fill, dtype=np.int64)
                for i, row in enumerate(rows):
                    out[i, : len(row[key])] = row[key]
                batch[key] = torch.from_numpy(out)
            else:
                batch[key] = row_field(rows, key, num_labels)
        return batch
    return collate


def packed_collate(num_labels: int | None = None):
    """Collate dict rows as packed real tokens, for cpuddp's encoder
    (train/encoder/packing.py): each token field one [tokens] row, the
    sequences longest first (equal lengths adjacent: one attention matmul
    per length), `cu_seqlens` their offsets [sequences + 1]; per-row fields
    (labels, QA positions) in the same order. No padding and no
    attention_mask: every token is real."""
    def collate(rows: list[dict]) -> dict:
        rows = sorted(rows, key=lambda r: -len(r["input_ids"]))  # stable: ties keep the sampler's order
        lengths = [len(r["input_ids"]) for r in rows]
        batch = {"cu_seqlens": torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))}
        for key in rows[0]:
            if key == "attention_mask":
                continue
            if key in PAD_KEYS:
                batch[key] = torch.from_numpy(np.concatenate([np.asarray(r[key], dtype=np.int64) for r in rows]))
            else:
                batch[key] = row_field(rows, key, num_labels)
        return batch
    return collate


def packed_from_padded(batch: dict) -> dict:
    """A right-padded batch of tensors (with its attention_mask) as
    packed_collate gives it: for batches built as tensors (the plan's
    profile, the benches) that cpuddp's encoder is to take as training does."""
    return packed_collate()(padded_rows(batch))


def padded_rows(batch: dict) -> list[dict]:
    """The dataset rows (lists and scalars) a right-padded batch of tensors holds, padding cut off."""
    lengths = batch["attention_mask"].sum(1).tolist()
    return [{key: (value[i, :n].tolist() if key in PAD_KEYS else value[i].tolist()) for key, value in batch.items()}
            for i, n in enumerate(lengths)]


def multi_hot(label_ids: list[list[int]], num_labels: int) -> torch.Tensor:
    out = torch.zeros(len(label_ids), num_labels)
    for i, ids in enumerate(label_ids):
        out[i, ids] = 1.0
    return out
