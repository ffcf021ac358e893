"""The scaling model: one node's measured step, a network, and the step
time, throughput and efficiency it predicts on N nodes for each lever.

One update on W = nodes x ranks-per-node ranks takes

    T(W) = k (forward + backward) + update + exposed(W) + fixed(W)

k micro-batches of accumulation each compute forward and backward; only the
last all-reduces its gradients. DDP groups the gradients into buckets in the
order backward produces them (`bucket_mb` each: cpuddp always passes
bucket_cap_mb, and then DDP makes no small first bucket) and
all-reduces them one after the other, each as soon as it is ready and the
previous one is done. A ring all-reduce of b bytes takes

    c(b) = 2 (W-1)/W * b / bandwidth + 2 (W-1) * latency    (+ compression work)

`exposed` is how long the last all-reduce ends after backward does: the
communication the backward pass could not hide (the rest overlaps it).
`fixed` is the per-update cost of running on W ranks beyond one rank's
step: DDP's broadcast of the model's buffers before forward and the loss
all-reduced every log_every updates, small messages priced like a small
all-reduce. Pure Python, no torch: the
report and `make compare` use it without the training stack.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace

MB = 1024 * 1024  # DDP's bucket_cap_mb counts MiB
LARGE = 1e6  # bytes: all-reduces this large tell the bandwidth, smaller ones the latency
SMALL_MESSAGE = 4096  # bytes: module buffers (position ids), the logged loss
COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
# All-reduces per bucket: PowerSGD reduces the uncompressed tensors, then P, then Q.
MESSAGES = {"none": 1, "fp16": 1, "bf16": 1, "powersgd": 3}


@dataclass(frozen=True)
class Network:
    """What the all-reduce sees: bytes/s each way on a node's link, and the
    time of one message step (one hop of the ring)."""
    bandwidth: float  # bytes per second
    latency: float  # seconds
    name: str = ""

    @classmethod
    def stated(cls, gbit: float, latency_us: float) -> Network:
        if gbit <= 0 or latency_us < 0:
            raise ValueError(f"network: bandwidth {gbit} Gbit/s must be > 0 and latency {latency_us} us >= 0")
        return cls(gbit * 1e9 / 8, latency_us * 1e-6, f"{gbit:g} Gbit/s, {latency_us:g} us")

    @property
    def gbit(self) -> float:
        return self.bandwidth * 8 / 1e9


# Ranks of one node reduce through memory (loopback TCP with gloo): assumed
# 32 Gbit/s and 20 us; it matters only with several ranks per node.
LOOPBACK = Network(4e9, 20e-6, "loopback")


@dataclass(frozen=True)
class Levers:
    """Micro-batches per update, how gradients travel, DDP's bucket size."""
    accumulation: int = 1
    compression: str = "none"
    bucket_mb: float = 25.0

    def __post_init__(self):
        if self.accumulation < 1 or self.bucket_mb <= 0 or self.compression not in COMPRESSIONS:
            raise ValueError(f"levers: accumulation {self.accumulation} (>= 1), bucket {self.bucket_mb} MB (> 0), "
                             f"compression {self.compression!r} (one of {' '.join(COMPRESSIONS)})")

    @property
    def label(self) -> str:
        parts = [f"accumulation {self.accumulation}"] if self.accumulation > 1 else []
        parts += [f"{self.compression} compression"] if self.compression != "none" else []
        parts += [f"bucket {self.bucket_mb:g} MB"] if self.bucket_mb != 25.0 else []
        return ", ".join(parts) or "no levers"


@dataclass
class Profile:
    """One rank's step alone on one node (plan/profile.py measures it)."""
    batch_size: int  # per rank and micro-batch
    forward: float  # seconds per micro-batch
    backward: float
    update: float  # once per update: optimizer, scheduler, zero_grad, loading the batch
    grads: list = field(default_factory=list)  # [bytes, seconds after backward starts], in the order ready
    # Compression work per gradient byte (seconds) and PowerSGD's bytes sent per byte.
    compress_seconds_per_byte: dict = field(default_factory=dict)
    powersgd_ratio: float = 1.0
    processes_per_node: int = 1
    log_every: int = 10
    source: str = "measured"

    @property
    def step(self) -> float:
        return self.forward + self.backward + self.update

    @property
    def grad_bytes(self) -> int:
        return sum(int(b) for b, _ in self.grads)

    def scaled_to(self, step_seconds: float, source: str = "") -> Profile:
        """The same step stretched to take `step_seconds` (a stated single-node time)."""
        if step_seconds <= 0:
            raise ValueError(f"step time {step_seconds} s must be > 0")
        f = step_seconds / self.step
        return replace(self, forward=self.forward * f, backward=self.backward * f, update=self.update * f,
                       grads=[[b, t * f] for b, t in self.grads],
                       compress_seconds_per_byte={k: v * f for k, v in self.compress_seconds_per_byte.items()},
                       source=source or f"stated {step_seconds:g} s per step")

    @classmethod
    def from_dict(cls, data: dict) -> Profile:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def to_dict(self) -> dict:
        return asdict(self)


def buckets(grads, bucket_mb: float) -> list[tuple[int, float]]:
    """(bytes, ready time) of each DDP bucket: gradients in the order they
    are ready, a bucket closed once it holds at least its cap."""
    out, size, ready = [], 0, 0.0
    for nbytes, when in grads:
        size, ready = size + int(nbytes), max(ready, float(when))
        if size >= bucket_mb * MB:
            out.append((size, ready))
            size = 0
    if size:
        out.append((size, ready))
    return out


def allreduce_seconds(nbytes: float, world: int, net: Network, messages: int = 1) -> float:
    """Ring all-reduce: 2(W-1) steps, each sending 1/W of the bytes."""
    if world <= 1:
        return 0.0
    return 2 * (world - 1) / world * nbytes / net.bandwidth + 2 * (world - 1) * net.latency * messages


def bucket_seconds(nbytes: int, world: int, net: Network, levers: Levers, profile: Profile) -> float:
    """One bucket's all-reduce with the lever's compression, and its work."""
    if world <= 1:
        return 0.0
    sent = {"none": 1.0, "fp16": 0.5, "bf16": 0.5, "powersgd": profile.powersgd_ratio}[levers.compression]
    work = profile.compress_seconds_per_byte.get(levers.compression, 0.0) * nbytes
    return allreduce_seconds(nbytes * sent, world, net, MESSAGES[levers.compression]) + work


@dataclass(frozen=True)
class Step:
    """One update on `nodes` nodes: its parts (seconds) and throughput."""
    nodes: int
    world: int
    seconds: float
    compute: float
    communication: float  # every bucket's all-reduce, hidden or not
    exposed: float  # the part after backward ended
    samples: int  # per update, over all ranks

    @property
    def overlap(self) -> float:
        return self.communication - self.exposed

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds


def predict(profile: Profile, net: Network, nodes: int, levers: Levers = Levers()) -> Step:
    """The update time on `nodes` nodes (see the module's docstring)."""
    world = nodes * profile.processes_per_node
    net = net if nodes > 1 else LOOPBACK
    k = levers.accumulation
    done = communication = 0.0
    for nbytes, ready in buckets(profile.grads, levers.bucket_mb):
        seconds = bucket_seconds(nbytes, world, net, levers, profile)
        done = max(ready, done) + seconds
        communication += seconds
    exposed = max(0.0, done - profile.backward) if communication else 0.0
    compute = k * (profile.forward + profile.backward) + profile.update
    fixed = allreduce_seconds(SMALL_MESSAGE, world, net) * (1 + 1 / profile.log_every)
    return Step(nodes, world, compute + exposed + fixed, compute, communication, exposed,
                k * profile.batch_size * world)


def efficiency(profile: Profile, net: Network, nodes: int, levers: Levers = Levers()) -> tuple[Step, float, float]:
    """(step, speedup, efficiency) against one node without levers."""
    one = predict(profile, net, 1).samples_per_second
    step = predict(profile, net, nodes, levers)
    speedup = step.samples_per_second / one
    return step, speedup, speedup / nodes


def fit_network(points: list[dict], name: str = "measured") -> Network:
    """Bandwidth and latency from all-reduce times {ranks, bytes, seconds}
    of the ring's form seconds = 2(W-1) latency + 2(W-1)/W bytes / bandwidth:
    the bandwidth from the points of at least LARGE bytes (least squares
    through the latency they imply), the latency from the median of the
    smaller ones once their bandwidth share is taken away."""
    rows = [(2 * (p["ranks"] - 1), 2 * (p["ranks"] - 1) / p["ranks"] * p["bytes"], p["seconds"], p["bytes"])
            for p in points if p["ranks"] > 1 and p["seconds"] > 0]
    large = [r for r in rows if r[3] >= LARGE]
    small = [r for r in rows if r[3] < LARGE] or rows
    if len({r[1] for r in large}) < 2:
        raise ValueError(f"network: need all-reduce times of at least two sizes of {LARGE / 1e6:g} MB or more")
    # seconds = a * hops + b * x over the large points (ordinary least squares, two unknowns)
    s11, s12, s22 = (sum(r[0] * r[0] for r in large), sum(r[0] * r[1] for r in large),
                     sum(r[1] * r[1] for r in large))
    r1, r2 = sum(r[0] * r[2] for r in large), sum(r[1] * r[2] for r in large)
    det = s11 * s22 - s12 * s12
    per_byte = (s11 * r2 - s12 * r1) / det if det else r2 / s22
    if per_byte <= 0:
        raise ValueError("network: the all-reduce times do not grow with size; measure larger sizes")
    latency = max(0.0, statistics.median((t - per_byte * x) / hops for hops, x, t, _ in small))
    net = Network(1 / per_byte, latency)
    return replace(net, name=f"{name}: {net.gbit:.3g} Gbit/s, {latency * 1e6:.0f} us")
