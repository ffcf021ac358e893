"""distributed.gradient_compression really changes what DDP all-reduces:
two real gloo ranks reduce the same gradients through CommTimer with each
setting. fp16 and bf16 round (bf16 more), PowerSGD approximates; `none` is
the exact mean. The levers bench's equal losses are Adam's doing, not a
hook that does nothing."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers import forked_ranks
from workflow.scripts.launch.command import free_port
from workflow.scripts.train.comm import CommTimer

STEPS = 12


def reduce_once(rank: int, compression: str, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(64, 64)
        ddp = DDP(model)
        ddp.register_comm_hook(CommTimer(compression), CommTimer.hook)
        torch.manual_seed(rank + 1)
        batch = torch.randn(8, 64)
        for _ in range(STEPS):  # PowerSGD reduces exactly for its first 10 (comm.reducer)
            model.zero_grad()
            ddp(batch).pow(2).sum().backward()
        torch.save({"reduced": model.weight.grad.clone(), "own": own_gradient(rank)}, f"{out}.{rank}")
        dist.barrier()
        del ddp  # before the group goes (the teardown order of train/process_group.py)
    finally:
        dist.destroy_process_group()


def own_gradient(rank: int) -> torch.Tensor:
    """The gradient this rank would have alone (same init, same batch)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    torch.manual_seed(rank + 1)
    model(torch.randn(8, 64)).pow(2).sum().backward()
    return model.weight.grad


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compression")
    found = {}
    for compression in ("none", "fp16", "bf16", "powersgd"):
        out = str(folder / compression)
        forked_ranks.spawn(reduce_once, args=(compression, free_port("127.0.0.1"), out), nprocs=2)
        found[compression] = [torch.load(f"{out}.{rank}") for rank in (0, 1)]
    return found


def test_none_is_the_exact_mean(reduced):
    mean = (reduced["none"][0]["own"] + reduced["none"][1]["own"]) / 2
    assert torch.allclose(reduced["none"][0]["reduced"], mean, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("compression, bound", [("fp16", 2e-3), ("bf16", 1e-2)])
def test_half_precision_rounds_what_is_sent(reduced, compression, bound):
    exact = reduced["none"][0]["reduced"]
    got = reduced[compression][0]["reduced"]
    error = float((got - exact).abs().max() / exact.abs().max())
    assert 0 < error < bound, f"{compression}: relative error {error:.2e}"
    assert torch.equal(got, reduced[compression][1]["reduced"])  # every rank applies the same update


def test_powersgd_sends_an_approximation_after_its_start(reduced):
    exact = reduced["none"][0]["reduced"]
    got = reduced["powersgd"][0]["reduced"]
    assert not torch.allclose(got, exact, rtol=1e-2)
    assert torch.allclose(got, reduced["powersgd"][1]["reduced"])
