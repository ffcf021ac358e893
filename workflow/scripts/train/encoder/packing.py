"""A batch as packed real tokens: every sequence's tokens one after the
other ([tokens, hidden] rows, no padding), with cu_seqlens-style offsets.

The sequences are packed longest first, so that sequences of one length
are adjacent: where the C attention kernel is not used (no
compiler), the attention runs one batched matmul per length (`groups`) on
views of the packed rows, with no copy into a padded layout.
`order` says which batch row each packed sequence came from; the heads put
their outputs back in the batch's order."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Packed:
    lengths: list[int]
    """Tokens of each packed sequence (packed order)."""
    offsets: list[int]
    """cu_seqlens: packed sequence i is rows offsets[i] .. offsets[i + 1] - 1."""
    order: torch.Tensor | None
    """The batch row of each packed sequence (None: the batch's own order)."""
    index: torch.Tensor | None
    """Each packed row's position in the flattened [batch x width] input (None: the input was packed)."""
    width: int
    """The padded width of the input (its longest sequence when the input was packed)."""
    layouts: dict = field(default_factory=dict, repr=False, compare=False)
    """The attention kernel's layouts of this packing (encoder/attention.layout), built once per batch."""

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def tokens(self) -> int:
        return self.offsets[-1]

    def groups(self) -> list[tuple[int, int, int]]:
        """(first sequence, sequences, length) of each run of equally long adjacent sequences."""
        runs, first = [], 0
        for i in range(1, self.batch + 1):
            if i == self.batch or self.lengths[i] != self.lengths[first]:
                runs.append((first, i - first, self.lengths[first]))
                first = i
        return runs

    def first_rows(self) -> torch.Tensor:
        """The packed row of each sequence's first token."""
        return torch.tensor(self.offsets[:-1], dtype=torch.long)

    def restore(self, per_sequence: torch.Tensor) -> torch.Tensor:
        """Rows in packed sequence order -> rows in the batch's order."""
        if self.order is None:
            return per_sequence
        return per_sequence.new_empty(per_sequence.shape).index_copy_(0, self.order, per_sequence)

    def padded(self, rows: torch.Tensor, fill: float) -> torch.Tensor:
        """Per-token values [tokens] -> [batch, width] in the batch's order, `fill` at padding."""
        out = rows.new_full((self.batch * self.width,), fill)
        if self.index is None:
            index = torch.cat([torch.arange(length) + i * self.width for i, length in enumerate(self.lengths)])
        else:
            index = self.index
        return out.index_copy(0, index, rows).view(self.batch, self.width)


def pack(attention_mask: torch.Tensor) -> Packed:
    """The packing of a right-padded batch (1 = real token). Raises ValueError
    where a row is empty or not right-padded (every head reads the first token)."""
    batch, width = attention_mask.shape
    real = attention_mask.bool()
    lengths = real.sum(1)
    if not bool((real == (torch.arange(width) < lengths.unsqueeze(1))).all()) or not bool((lengths > 0).all()):
        raise ValueError("the encoder takes right-padded batches with at least one real token per row "
                         "(attention_mask 1 ... 1 0 ... 0)")
    order = torch.sort(lengths, descending=True, stable=True).indices
    sorted_lengths = lengths.index_select(0, order)
    columns = torch.arange(width)
    index = (order.unsqueeze(1) * width + columns)[columns < sorted_lengths.unsqueeze(1)]
    as_list = sorted_lengths.tolist()
    return Packed(as_list, _offsets(as_list), order, index, width)


def from_offsets(cu_seqlens) -> Packed:
    """The packing of input already packed, sequence i at rows cu_seqlens[i] .. cu_seqlens[i + 1] - 1."""
    offsets = cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else [int(o) for o in cu_seqlens]
    lengths = [b - a for a, b in zip(offsets, offsets[1:])]
    if offsets[0] != 0 or min(lengths, default=0) <= 0:
        raise ValueError(f"cu_seqlens must start at 0 and rise: {offsets[:8]}...")
    return Packed(lengths, offsets, None, None, max(lengths))


def bucketed_rows(tokens: int) -> int:
    """`tokens` rounded up to a multiple of 1/32 of the next power of two
    (at least 8): 800 -> 800, 801 -> 832, 210 -> 216. oneDNN compiles a bf16
    matmul's kernels for each new row count, 3-14 ms a shape on an AMX
    Xeon (fp32's MKL path does not), and packed batches bring a new token
    count nearly every step: a MiniLM step took 0.24-0.26 s on new counts
    against 0.19 s on one it had seen. Buckets of 1/32 leave a task a
    dozen shapes, seen within its first steps, for 1.6-3% of padded rows
    on average (under 1/16 of the tokens above 128, 8 rows below)."""
    step = max(8, 1 << max(0, (tokens - 1).bit_length() - 5))
    return -(-tokens // step) * step


def _offsets(lengths: list[int]) -> list[int]:
    out = [0]
    for length in lengths:
        out.append(out[-1] + length)
    return out


def take(packed: Packed, values: torch.Tensor | None) -> torch.Tensor | None:
    """[batch, width] per-token values -> [tokens] in packed order (packed input: as it is)."""
    if values is None or packed.index is None:
        return values
    return values.reshape(-1).index_select(0, packed.index)


def positions(packed: Packed, input_ids: torch.Tensor, pad_id: int, roberta: bool) -> torch.Tensor:
    """Each packed token's position id as transformers computes it: its
    column (BERT, ELECTRA, DistilBERT), or pad_id + 1 + the count of
    non-pad tokens up to it (RoBERTa, XLM-R, CamemBERT)."""
    if packed.index is None:
        within = torch.cat([torch.arange(length) for length in packed.lengths])
        if not roberta:
            return within
        counted = _packed_cumsum(input_ids.ne(pad_id).long(), packed)
        return counted * input_ids.ne(pad_id).long() + pad_id
    if not roberta:
        return packed.index % packed.width
    return take(packed, _roberta_positions(input_ids.view(packed.batch, packed.width), pad_id))


def _roberta_positions(input_ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    mask = input_ids.ne(pad_id).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + pad_id


def _packed_cumsum(values: torch.Tensor, packed: Packed) -> torch.Tensor:
    total = torch.cumsum(values, 0)
    starts = torch.tensor([0] + [int(total[o - 1]) for o in packed.offsets[1:-1]])
    return total - starts.repeat_interleave(torch.tensor(packed.lengths))
