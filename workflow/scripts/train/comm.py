"""The gradient all-reduce: its compression, and how long each step waits
for it.

DDP calls the comm hook when a bucket's gradients are ready; after the
last call the backward computation is done, so whatever time backward()
still takes is spent waiting for the all-reduce to finish. A hook that
reduces before it returns (the node's shared memory, the embedding's rows)
holds the backward while it does: its time counts as exposed too, as does
a compression hook's own work before it hands the bucket to the backend
(a cast, PowerSGD's matmuls); gloo's plain hook returns at once. Counting
only the tail had put a 2 x 1 MiniLM update's exposed all-reduce under
1 ms when its one synchronous bucket took 44 ms of 330. The hook also
counts buckets and the backward passes that reduced (with gradient
accumulation, one in `accumulation`), and, after the first `warmup`
updates (DDP rebuilds its buckets after the first), times each update and
each bucket's all-reduce: the step split into compute, exposed
communication and overlap that the scaling plan predicts.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

COMPRESSION = ("none", "fp16", "bf16", "powersgd")


def reducer(compression: str):
    """(hook, its state) that all-reduces a bucket with `compression`."""
    if compression == "powersgd":
        # Rank-1 approximation after 10 plain steps (the error feedback needs a start).
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=10, use_error_feedback=True, warm_start=True)
        return powerSGD_hook.powerSGD_hook, state
    hooks = {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
             "bf16": default_hooks.bf16_compress_hook}
    if compression not in hooks:
        raise ValueError(f"distributed.gradient_compression: {compression!r}; choose one of: {' '.join(COMPRESSION)}")
    return hooks[compression], None


def allreduce_rows(bucket, table: torch.nn.Parameter, sent: list[int], touched=None, node=None, adopt=False):
    """The bucket holding the word embedding, all-reduced as the default hook
    does (divide by the world size, then sum) but sending of the embedding's
    gradient only the rows some rank touched: a batch uses a few hundred of
    its ~30,000 rows and every other row is exactly zero on every rank, so
    the result is the dense one, bit for bit. The ranks' row lists are
    gathered first; the embedding's bucket is the last one backward fills,
    so waiting for them here hides no compute. `touched` (a speed.GradPool)
    knows this rank's rows without reading the table; `node` (the node's
    shared-memory all-reduce, or None for the backend) gathers the rows and
    sums them and the rest of the bucket, dividing as it copies in: two gloo
    all-gathers and a division pass over the bucket had cost 1.6 and 1.8 ms
    of a 2 x 1 MiniLM update (AMD EPYC). `adopt`: the pool writes the
    next step's table into this bucket's view (grad_buckets direct)."""
    world = dist.get_world_size()
    buffer, grads = bucket.buffer(), bucket.gradients()
    at = next(i for i, p in enumerate(bucket.parameters()) if p is table)
    rows = union_of_rows(grads[at], touched.touched_rows() if touched is not None else None,
                         node.all_gather if node is not None else None)
    sent[:] = [sent[0] + 1, sent[1] + rows.numel(), sent[2] + grads[at].shape[0]]
    table_rows = grads[at][rows]
    # The bucket's other gradients are summed where they lie, in the
    # buffer before and after the table (DDP's bucket views): packing them
    # into one tensor and back cost two copies of the bucket per step.
    start = (grads[at].data_ptr() - buffer.data_ptr()) // buffer.element_size()
    for part in (table_rows, buffer[:start], buffer[start + grads[at].numel():]):
        if part.numel():
            mean(part, world, node)
    grads[at].index_copy_(0, rows, table_rows)
    if adopt and touched is not None:
        touched.adopt(grads[at], rows)
    return _done(bucket.buffer())


def mean(part: torch.Tensor, world: int, node=None) -> torch.Tensor:
    """`part` divided by `world` on every rank and summed, in place: the
    node's all-reduce divides as it copies in; the backend's after div_.
    One rank's mean is its own gradient, bit for bit (x / 1 is x): no pass."""
    if world == 1:
        return part
    if node is not None:
        return node.all_reduce(part, divide=world)
    dist.all_reduce(part.div_(world))
    return part


def _done(value: torch.Tensor) -> torch.futures.Future:
    done = torch.futures.Future()
    done.set_result(value)
    return done


def union_of_rows(grad: torch.Tensor, mine: torch.Tensor | None = None, gather=None) -> torch.Tensor:
    """Indices of the rows that are non-zero on any rank (or may be: a row
    some rank's batch used whose sum came out zero is sent as zeros), sorted.
    `gather`: every rank's int64 indices in rank order (the node's
    all_gather), else two backend all-gathers (the counts, then the rows)."""
    if mine is None:
        mine = grad.ne(0).any(dim=1).nonzero().flatten()
    if dist.get_world_size() == 1:
        return mine
    if gather is not None:
        return torch.cat(gather(mine.to(torch.int64))).unique()
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([mine.numel()]))
    longest = int(max(c.item() for c in counts))
    padded = torch.full((longest,), -1, dtype=torch.int64)
    padded[:mine.numel()] = mine
    gathered = [torch.empty(longest, dtype=torch.int64) for _ in counts]
    dist.all_gather(gathered, padded)
    union = torch.cat(gathered).unique()
    return union[union >= 0]


class BucketTimes:
    """Per bucket of the timed updates: bytes, all-reduces, their seconds
    (from ready, or from the previous bucket's end if later, to done) and
    ready offsets from the start of backward."""

    def __init__(self):
        self.by_bucket: dict[tuple[int, int], list[float]] = {}
        self.previous_done = 0.0

    def add(self, index: int, nbytes: int, ready: float, done: float, backward_start: float) -> None:
        entry = self.by_bucket.setdefault((index, nbytes), [0, 0.0, 0.0])
        seconds = done - max(ready, self.previous_done if index else ready)
        self.previous_done = done
        entry[0] += 1
        entry[1] += seconds
        entry[2] += ready - backward_start

    def record(self) -> list[dict]:
        return [{"index": i, "bytes": b, "allreduces": n, "seconds": round(s / n, 6), "ready": round(r / n, 6)}
                for (i, b), (n, s, r) in sorted(self.by_bucket.items())]


class CommTimer:
    """DDP comm hook state that reduces buckets and measures the wait."""

    def __init__(self, compression: str = "none", warmup: int = 2, rows_of: torch.nn.Parameter | None = None,
                 touched=None, node=None, views=None):
        self.inner, self.inner_state = reducer(compression)
        # grad_buckets' views (train/bucket_grads.py), learnt from each bucket; None: off.
        self.views = views
        # The node's shared-memory all-reduce (train/node_allreduce.py), or
        # None: the backend's (and every compressed bucket goes that way).
        self.node = node if compression == "none" else None
        # The word embedding whose gradient goes as its touched rows
        # (allreduce_rows); None = every bucket dense.
        self.rows_of = rows_of if compression == "none" else None
        self.touched = touched
        self.rows_sent = [0, 0, 0]  # row all-reduces, rows sent, rows of the table
        self.warmup = warmup
        self.updates = 0
        self._update_start = None
        self._backward_start = 0.0
        self._bucket = 0
        self.timed = {"updates": 0, "update_seconds": 0.0, "reductions": 0, "exposed_seconds": 0.0}
        self.bucket_times = BucketTimes()
        self.compression = compression
        self.last_ready = 0.0
        self.inside = self.last_inside = 0.0  # seconds in this backward's hooks, and in its last one
        self.wait_seconds = 0.0
        self.last_waited = 0.0  # seconds the last backward waited for the all-reduce
        self.step_seconds = 0.0
        self._step_start = None
        self.buckets = 0  # hook calls
        self.backwards = 0
        self.reducing_backwards = 0

    def alone(self) -> bool:
        """One rank, uncompressed: every bucket is its own mean (mean()).
        gloo's all-reduce of one rank and the division by 1 had cost a 1 x 2
        MiniLM update 3 ms of 214 (AMD EPYC, SST-2's lengths); a compressed
        bucket still takes its hook's rounding."""
        return self.compression == "none" and dist.get_world_size() == 1

    @property
    def timing(self) -> bool:
        return self.updates > self.warmup

    @staticmethod
    def hook(state, bucket):  # no annotations: DDP compares them to real types
        state.last_ready = ready = time.perf_counter()
        state.buckets += 1
        if state.views is not None:
            state.views.learn(bucket)
        if state.rows_of is not None and any(p is state.rows_of for p in bucket.parameters()):
            future = allreduce_rows(bucket, state.rows_of, state.rows_sent, state.touched, state.node,
                                    adopt=state.views is not None)
        elif state.node is not None or state.alone():  # as the default hook: divide by the world size, then sum
            future = _done(mean(bucket.buffer(), dist.get_world_size(), state.node))
        else:
            future = state.inner(state.inner_state, bucket)
        state.last_inside = time.perf_counter() - ready
        state.inside += state.last_inside
        if not state.timing:
            return future
        index, nbytes, start = state._bucket, bucket.buffer().numel() * bucket.buffer().element_size(), \
            state._backward_start
        state._bucket += 1

        def done(reduced):
            state.bucket_times.add(index, nbytes, ready, time.perf_counter(), start)
            return reduced.value()
        return future.then(done)

    def begin_update(self) -> None:
        """Called as each update starts: times the one before."""
        now = time.perf_counter()
        if self.timing and self._update_start is not None:
            self.timed["updates"] += 1
            self.timed["update_seconds"] += now - self._update_start
        self.updates += 1
        self._update_start = now

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(), adding the time it spent on the all-reduce: after the
        last bucket was ready, and inside the hooks before it."""
        now = time.perf_counter()
        self._backward_start, self._bucket = now, 0
        if self._step_start is not None:
            self.step_seconds += now - self._step_start
        self._step_start = now
        self.last_ready = self.last_waited = 0.0
        self.inside = self.last_inside = 0.0
        loss.backward()
        self.backwards += 1
        if self.last_ready:
            self.reducing_backwards += 1
            # After the last hook's start, plus what the hooks before it held the backward.
            waited = time.perf_counter() - self.last_ready + self.inside - self.last_inside
            self.last_waited = waited
            self.wait_seconds += waited
            if self.timing:
                self.timed["reductions"] += 1
                self.timed["exposed_seconds"] += waited

    def wait_share(self) -> float:
        """Share of step time (between backward calls) spent waiting."""
        return round(self.wait_seconds / self.step_seconds, 4) if self.step_seconds else 0.0

    def counts(self) -> dict:
        reduces, sent, table = self.rows_sent
        return {"buckets_reduced": self.buckets, "backward_passes": self.backwards,
                "reducing_backward_passes": self.reducing_backwards,
                "embedding_rows_sent_share": round(sent / table, 4) if reduces else None}

    def step_split(self) -> dict:
        """Mean update of the timed ones: seconds, compute, exposed
        communication, all-reduce time and overlap; and every bucket."""
        n = self.timed["updates"]
        if not n:
            return {"updates": 0}
        buckets = self.bucket_times.record()
        update = self.timed["update_seconds"] / n
        exposed = self.timed["exposed_seconds"] / max(self.timed["reductions"], 1)
        communication = sum(b["seconds"] for b in buckets)
        return {"updates": n, "update_seconds": round(update, 6), "compute_seconds": round(update - exposed, 6),
                "exposed_seconds": round(exposed, 6), "communication_seconds": round(communication, 6),
                "overlap_seconds": round(max(communication - exposed, 0.0), 6), "buckets": buckets}
