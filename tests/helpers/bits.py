"""A float tensor's bits, for tests that compare results bit for bit (a zero's sign and a NaN's bits too)."""

from __future__ import annotations

import torch


def bits(t: torch.Tensor) -> torch.Tensor:
    """bf16 as int16, fp32 as int32: torch.equal on these is bitwise."""
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)
