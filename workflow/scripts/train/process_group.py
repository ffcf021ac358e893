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
import os
import time
import traceback
from contextlib import contextmanager

import torch
import torch.distributed as dist

from workflow.scripts.probes import oneccl
from workflow.scripts.launch import ccl
from workflow.scripts.launch.ranks import DistEnv
from workflow.scripts.train import ccl_shm

RECORDED_PREFIXES = ("CCL_", "FI_", "I_MPI_HYDRA_IFACE")
# Building the model (loading, compiling a kernel, DDP's first broadcast) and
# saving it take uneven time per rank, more so on a busy node: a rank that is
# done early waits in a collective for the others. Those waits get at least
# this long; the training steps get distributed.timeout_minutes (`steps`), so
# that a frozen rank is still found in bounded time. (A try whose rank 0 took
# 23 s to build on a loaded node failed under a 15 s timeout.)
SETUP_MINUTES = 10.0


def init(backend: str, env: DistEnv, timeout_minutes: float) -> None:
    if backend == "ccl":
        ccl_shm.remove()  # regions of this user's ccl ranks killed before they left (train/ccl_shm.py)
        os.environ.update(ccl.local_variables(env.local_rank, env.local_world_size))
        import oneccl_bindings_for_pytorch  # noqa: F401  registers the ccl backend
    dist.init_process_group(backend, rank=env.rank, world_size=env.world_size,
                            timeout=datetime.timedelta(minutes=setup_minutes(backend, timeout_minutes)))


def setup_minutes(backend: str, timeout_minutes: float) -> float:
    """The timeout outside the steps: gloo's can be changed once joined
    (`steps`), oneCCL's cannot, so ccl keeps distributed.timeout_minutes."""
    return max(timeout_minutes, SETUP_MINUTES) if backend == "gloo" else timeout_minutes


def _set_timeout(minutes: float) -> None:
    dist.distributed_c10d._set_pg_timeout(datetime.timedelta(minutes=minutes))


@contextmanager
def steps(backend: str, timeout_minutes: float):
    """The training steps' collectives (and the evaluations and checkpoints
    between them) must end within distributed.timeout_minutes."""
    setup = setup_minutes(backend, timeout_minutes)
    if setup == timeout_minutes:  # ccl, or a timeout already as long as the setup's: nothing to change
        yield
        return
    _set_timeout(timeout_minutes)
    try:
        yield
    finally:
        _set_timeout(setup)


def describe() -> dict:
    """The group this rank joined, as it really is: the backend's name and
    implementation class (ProcessGroupCCL for oneCCL), and for ccl the
    libraries mapped into this process and the CCL_/FI_ variables it sees."""
    backend = dist.get_backend()
    impl = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    found = {"backend": backend, "implementation": type(impl).__name__}
    if backend == "ccl":
        found["libraries"] = oneccl.loaded_libraries()
        found["env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith(RECORDED_PREFIXES)}
    return found


@contextmanager
def joined(backend: str, env: DistEnv, timeout_minutes: float):
    """The body must keep what holds the group (the DDP model) in its own
    function's locals, which are gone when that function returns."""
    init(backend, env, timeout_minutes)
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
    backend = dist.get_backend()
    dist.destroy_process_group()
    if backend == "ccl":
        ccl_shm.remove(own=True)  # libfabric's shm regions would outlive the rank


def live_ddp_models() -> list:
    """DDP wrappers still alive in this process (none may be at leave())."""
    from torch.nn.parallel import DistributedDataParallel

    return [o for o in gc.get_objects() if isinstance(o, DistributedDataParallel)]
