"""The gradient all-reduce of ranks that share one node, through shared
memory (train.speed.allreduce `shm`).

gloo all-reduces over TCP even between two processes of one machine: a
22 MB bf16 gradient took 29 ms and 20 ms of each rank's CPU (AMD EPYC, 2
cores), CPU that the other rank's backward wanted. Here every rank copies
its gradient, a chunk at a time, into its slot of one shared-memory file,
and each rank adds the slots up in rank order into its own gradient: every
rank computes the same sum in the same order, so the ranks' weights stay
equal; with two ranks it is gloo's sum bit for bit (one rounded add).

The ranks meet at a barrier on shared counters (each rank writes only its
own, so plain stores suffice: x86-64 keeps stores in order, which is why
other machines keep their backend). A rank that waits checks that the
others are alive and gives up after the run's distributed timeout, with
one line that names the rank.

The file is this user's alone: rank 0 creates it 0600 with O_EXCL (never
through a name someone else placed), and unlinks it as soon as every rank
has mapped it, or on the way out of any failure before that. A file whose
creator was killed before then (SIGKILL) is removed by the next run's
rank 0 on the node.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import time
import uuid
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from workflow.scripts.launch.supervise import pid_alive, unlink_own_files

CHUNK_BYTES = 8 << 20  # per rank; a chunk is copied in, added, then the slots are free again
LINE = 64  # bytes per rank's counter: one cache line each, so ranks never write the same line
SHM = Path("/dev/shm")
PREFIX = "cpuddp-allreduce-"  # then the creator's pid, a dash and a random hex name
STALE = re.compile(re.escape(PREFIX) + r"(\d+)-[0-9a-f]+")


class NodeAllReduce:
    """In-place sum of a flat tensor over the ranks of one node."""

    def __init__(self, memory: torch.Tensor, rank: int, pids: list[int], timeout_s: float,
                 chunk_bytes: int = CHUNK_BYTES, path: str = ""):
        self.world, self.rank, self.pids, self.timeout_s = len(pids), rank, pids, timeout_s
        self.path = path  # the file behind `memory`, unlinked once every rank mapped it
        self.memory = memory  # keeps the mapping alive
        self.counters = memory[:LINE * self.world].numpy().view(np.int64)[::LINE // 8]
        self.slots = memory[LINE * self.world:].view(self.world, chunk_bytes)
        self.chunk_bytes = chunk_bytes
        self.epoch = int(self.counters[rank])

    def all_reduce(self, tensor: torch.Tensor, divide: int = 1) -> torch.Tensor:
        """Sum `tensor` (contiguous) over the node's ranks, in place; with
        `divide`, of every rank's tensor divided by it first (DDP's mean:
        the division is the copy into the slot, not a pass of its own, and
        the same torch division as tensor.div_(divide))."""
        flat = tensor.view(-1)
        per_chunk = self.chunk_bytes // tensor.element_size()
        for start in range(0, flat.numel(), per_chunk):
            part = flat[start:start + per_chunk]
            nbytes = part.numel() * part.element_size()
            own = self.slots[self.rank, :nbytes].view(tensor.dtype)
            if divide == 1:
                own.copy_(part)
            else:
                torch.div(part, divide, out=own)
            self.meet()
            slots = [self.slots[r, :nbytes].view(tensor.dtype) for r in range(self.world)]
            torch.add(slots[0], slots[1], out=part)
            for slot in slots[2:]:
                part.add_(slot)
            self.meet()  # every rank has read every slot: they may be written again
        return tensor

    def all_gather(self, values: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's 1-d int64 `values` (of any length up to a slot's), in rank order."""
        slot_values = self.chunk_bytes // 8 - 1
        if values.numel() > slot_values:
            raise ValueError(f"all_gather: {values.numel()} values, a slot holds {slot_values}")
        own = self.slots[self.rank].view(torch.int64)
        own[0] = values.numel()
        own[1:1 + values.numel()].copy_(values)
        self.meet()
        gathered = []
        for r in range(self.world):
            slot = self.slots[r].view(torch.int64)
            gathered.append(slot[1:1 + int(slot[0])].clone())
        self.meet()  # every rank has read every slot: they may be written again
        return gathered

    def meet(self) -> None:
        """Wait until every rank of the node has called this as often (a barrier)."""
        self.epoch += 1
        self.counters[self.rank] = self.epoch
        spins, started = 0, None
        while self.counters.min() < self.epoch:
            spins += 1
            if spins > 1024:  # the others are late: yield the core (with more ranks than cores, a
                time.sleep(100e-6)  # spinning rank would take the CPU the late one needs)
                if spins % 256 == 0:
                    started = started or time.monotonic()
                    self._check_peers(started)

    def _check_peers(self, started: float) -> None:
        late = [r for r in range(self.world) if self.counters[r] < self.epoch]
        for r in late:
            if not pid_alive(self.pids[r]):  # a zombie counts as dead
                raise RuntimeError(f"rank {r} (pid {self.pids[r]}) died during the shared-memory gradient "
                                   "all-reduce; see its log")
        if time.monotonic() - started > self.timeout_s:
            raise RuntimeError(f"rank(s) {', '.join(map(str, late))} did not reach the shared-memory gradient "
                               f"all-reduce within {self.timeout_s / 60:.0f} min (distributed.timeout_minutes); "
                               "see their logs")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def create_file(path: Path, size: int) -> None:
    """A new zero-filled file of `size` bytes, mode 0600; an existing name
    (a file, a link) is an error, never opened."""
    handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(handle, 0o600)  # whatever the umask: another user must not read or change the sums
        os.ftruncate(handle, size)  # zero-filled: every counter starts at 0
    except OSError:
        os.unlink(path)
        raise
    finally:
        os.close(handle)


def remove_stale(folder: Path = SHM) -> list[Path]:
    """Unlink this user's all-reduce files whose creating process is gone
    (killed before it could unlink them); the ones removed."""
    return unlink_own_files(folder, STALE, lambda pid: not pid_alive(pid))


def _map(path: Path, rank: int, size: int) -> torch.Tensor:
    """Every rank's mapping of the file rank 0 creates; rank 0 unlinks it
    once all have mapped it, or on the way out of a failure before that."""
    if rank == 0:
        create_file(path, size)
    try:
        dist.barrier()
        memory = torch.from_file(str(path), shared=True, size=size, dtype=torch.uint8)
        dist.barrier()
        return memory
    finally:
        if rank == 0:
            path.unlink(missing_ok=True)  # the mappings stay; nothing is left behind


def create(timeout_s: float, chunk_bytes: int = CHUNK_BYTES) -> tuple[NodeAllReduce | None, str | None]:
    """(the node's all-reduce, None), or (None, why not). Every rank calls
    it at the same point (it is collective), and all get the same answer."""
    if not dist.is_available() or not dist.is_initialized():
        return None, "no process group"
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1:
        return None, "one rank: there is nothing to all-reduce"
    if platform.machine() not in ("x86_64", "AMD64"):
        return None, f"{platform.machine()}: the shared counters rely on x86-64's store order"
    size = LINE * world + world * chunk_bytes
    free = shutil.disk_usage(SHM).free if SHM.is_dir() else 0
    seen = [None] * world
    dist.all_gather_object(seen, (socket.gethostname(), _boot_id(), os.getpid(), free))
    if len({(host, boot) for host, boot, _, _ in seen}) > 1:
        return None, "the ranks are on more than one node"
    if min(f for *_, f in seen) < size:
        return None, f"{SHM} has {min(f for *_, f in seen) >> 20} MiB free, {size >> 20} MiB needed"
    if rank == 0:
        remove_stale()
    name = [str(SHM / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex}") if rank == 0 else None]
    dist.broadcast_object_list(name, src=0)
    memory = _map(Path(name[0]), rank, size)
    return NodeAllReduce(memory, rank, [pid for _, _, pid, _ in seen], timeout_s, chunk_bytes,
                         name[0]), None
