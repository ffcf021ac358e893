"""OpenVINO with fixed sequence lengths: the alternative to dynamic shapes.

`dynamic`: one compiled model takes every (batch, length).
`buckets`: inputs are padded to the next of a few lengths (16, 32, 64, ...,
the longest row of the data) and each length has its own compiled model,
reshaped to that static length (batch stays dynamic), so the CPU plugin
sees a handful of fixed shapes. Padding is masked, so the outputs are those
of the real tokens; QA logits are cut back to the real length.

Which one pays depends on the CPU and the model: evaluate_runtimes measures
both side by side and keeps the faster (docs/int8-and-deploy.md, Fixed shapes or dynamic shapes).
"""

from __future__ import annotations

import numpy as np
import torch

SHAPE_MODES = ("dynamic", "buckets")
SMALLEST_BUCKET = 16
# Outputs with one value per token: cut back to the unpadded length.
PER_TOKEN_OUTPUTS = ("start_logits", "end_logits")


def bucket_lengths(longest: int, smallest: int = SMALLEST_BUCKET) -> list[int]:
    """Powers of two from `smallest` below `longest`, then `longest` itself."""
    lengths, n = [], smallest
    while n < longest:
        lengths.append(n)
        n *= 2
    return lengths + [max(longest, 1)]


def bucket_for(length: int, buckets: list[int]) -> int:
    """The shortest bucket that holds `length` (longer inputs keep their length)."""
    return next((b for b in buckets if b >= length), length)


def pad_to(feed: dict, length: int, pad_id: int) -> dict:
    """Numpy inputs padded on the right to `length` (input_ids with pad_id, the rest 0)."""
    padded = {}
    for name, value in feed.items():
        array = value.numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        extra = length - array.shape[1]
        fill = pad_id if name == "input_ids" else 0
        padded[name] = np.pad(array, ((0, 0), (0, extra)), constant_values=fill) if extra > 0 else array
    return padded


class BucketedRunner:
    """Runs an OpenVINO model at bucketed static lengths, compiling each length once."""

    def __init__(self, ov_model, outputs, buckets: list[int], pad_id: int, compile_fn):
        self.model, self.outputs, self.buckets = ov_model, tuple(outputs), list(buckets)
        self.pad_id, self.compile_fn = pad_id, compile_fn
        self.inputs = tuple(port.get_any_name() for port in ov_model.inputs)
        self.requests = {}

    def request(self, length: int):
        if length not in self.requests:
            model = self.model.clone()
            model.reshape({name: [-1, length] for name in self.inputs})
            self.requests[length] = self.compile_fn(model).create_infer_request()
        return self.requests[length]

    def __call__(self, feed: dict) -> dict:
        real = feed["input_ids"].shape[1]
        length = bucket_for(real, self.buckets)
        result = self.request(length).infer(pad_to(feed, length, self.pad_id))
        out = {}
        for name in self.outputs:
            value = np.array(result[name])
            out[name] = torch.from_numpy(value[:, :real] if name in PER_TOKEN_OUTPUTS else value)
        return out
