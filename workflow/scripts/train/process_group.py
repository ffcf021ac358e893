"""Join the process group, and leave it without the teardown deadlock.

gloo's worker threads free the tensors of the last collectives with the GIL,
while the group's C++ destructor joins those threads; when the destructor
runs with the GIL held (from a DDP Reducer that outlives
`destroy_process_group`, pytorch issue 56297), both wait forever. So the
group is left in this order: the caller's objects that hold it (DDP and its
Reducer, comm hooks, optimizers) are released, the workers get the GIL to
finish their last work, and only then is the group destroyed.
"""

from __future__ import annotations

import datetime
import gc
import time
import traceback
from contextlib import contextmanager

import torch.distributed as dist


def init(backend: str, rank: int, world_size: int, timeout_minutes: float) -> None:
    if backend == "ccl":
        import oneccl_bindings_for_pytorch  # noqa: F401  registers the ccl backend
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(minutes=timeout_minutes))


@contextmanager
def joined(backend: str, rank: int, world_size: int, timeout_minutes: float):
    """The body must keep what holds the group (the DDP model) in its own
    function's locals, which are gone when that function returns."""
    init(backend, rank, world_size, timeout_minutes)
    try:
        yield
    except BaseException as err:
        # The traceback keeps the failed frames, and their DDP model, alive.
        traceback.clear_frames(err.__traceback__)
        raise
    finally:
        leave()


def leave() -> None:
    gc.collect()  # modules sit in reference cycles; a Reducer in one holds the group
    time.sleep(0.05)  # lets gloo's workers take the GIL and free their last work
    dist.destroy_process_group()


def live_ddp_models() -> list:
    """DDP wrappers still alive in this process (none may be at leave())."""
    from torch.nn.parallel import DistributedDataParallel

    return [o for o in gc.get_objects() if isinstance(o, DistributedDataParallel)]
