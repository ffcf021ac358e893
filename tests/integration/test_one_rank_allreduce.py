"""One rank (a 1 x N layout) all-reduces nothing: through CommTimer its DDP
gradients are the ones plain autograd gives, bit for bit, with no
collective and no division pass in its backward, the word embedding's
rows path included. A compressed bucket still takes its hook's rounding."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers import forked_ranks
from workflow.scripts.launch.command import free_port
from workflow.scripts.train.comm import CommTimer


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 32)
        self.dense = torch.nn.Linear(32, 32)

    def forward(self, ids):
        return self.dense(self.embed(ids)).pow(2).sum()


def gradients(model: Tiny, run, ids) -> dict:
    model.zero_grad()
    run(ids).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def alone(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        ids = torch.tensor([[3, 7, 7, 42], [9, 3, 0, 1]])
        found = {}
        for compression in ("none", "bf16"):
            torch.manual_seed(0)
            model = Tiny()
            plain = gradients(model, model, ids)
            ddp = DDP(model, gradient_as_bucket_view=True)
            ddp.register_comm_hook(CommTimer(compression, rows_of=model.embed.weight), CommTimer.hook)
            for _ in range(2):  # DDP rebuilds its buckets after the first backward
                gradients(model, ddp, ids)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                through = gradients(model, ddp, ids)
            found[compression] = {"plain": plain, "ddp": through,
                                  "ops": sorted({e.name for e in prof.events()})}
            del ddp
        torch.save(found, out)
    finally:
        dist.destroy_process_group()


def test_one_rank_keeps_its_gradients_bit_for_bit_and_reduces_nothing(tmp_path):
    out = str(tmp_path / "alone.pt")
    forked_ranks.spawn(alone, args=(free_port("127.0.0.1"), out), nprocs=1)
    found = torch.load(out)
    exact = found["none"]
    assert all(torch.equal(exact["ddp"][name], grad) for name, grad in exact["plain"].items())
    assert not [op for op in exact["ops"] if "allreduce" in op.lower() or "all_gather" in op.lower()
                or op in ("aten::div_", "aten::div")], exact["ops"]
    rounded = found["bf16"]  # the compression hook's cast: what one rank asked for, not the identity
    assert not torch.equal(rounded["ddp"]["dense.weight"], rounded["plain"]["dense.weight"])
