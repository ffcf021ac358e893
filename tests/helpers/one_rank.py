"""A one-rank gloo group for in-process tests of DDP code.

Leaving it goes through the product's own process_group.leave(): the DDP
model must be gone first (a Reducer left alive while the group is destroyed
can hang gloo's destructor joining its threads, as it did in the unit
lane), so keep the DDP model in a function that has returned, or `del` it.
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def one_rank_group():
    import torch.distributed as dist

    from workflow.scripts.train import process_group

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        process_group.leave()
