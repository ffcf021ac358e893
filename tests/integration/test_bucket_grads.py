"""grad_buckets direct (train/bucket_grads.py): on two real gloo ranks with
different batches, cpuddp's encoder computing its linear layers' and its
word embedding's gradients straight into DDP's bucket views gives the
gradients of torch's backward bit for bit, update after update, with and
without gradient accumulation, in fp32 and in bf16 (bf16_master's encoder),
with the node's shared-memory all-reduce and the row all-reduce as a run
has them; and once DDP has rebuilt its buckets it copies none of those
gradients into them (what the lever is for)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import BertConfig, BertForSequenceClassification

from helpers import forked_ranks
from workflow.scripts.train import comm, encoder, master, node_allreduce, speed
from workflow.scripts.train.bucket_grads import BucketViews

# No other 2-D parameter shares a linear layer's or the word embedding's shape (copies are counted by shape).
CONFIG = BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=40, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
UPDATES = 4  # DDP rebuilds its buckets as the second update starts: from the third, the views are the rebuilt
# buckets', each holding the last update's sums


def gradients(rank: int, micro_batches: int, bf16: bool, direct: bool, node) -> tuple[list[dict], list[int]]:
    """Each update's gradients, and per update the copies into DDP's buckets, in its last backward, of
    gradients shaped as a direct parameter (a linear layer's weight or the word embedding)."""
    torch.manual_seed(0)  # the same weights on both ranks
    model, _ = encoder.build(BertForSequenceClassification(CONFIG), "classification", hash_dropout=False)
    if bf16:
        master.to_bf16_encoder(model)
    pool, views = speed.GradPool(), BucketViews() if direct else None
    model.use_grad_pool(pool)
    model.use_bucket_views(views)
    timer = comm.CommTimer("none", rows_of=model.get_input_embeddings().weight, touched=pool, node=node,
                           views=views)
    ddp = DDP(model, gradient_as_bucket_view=True, bucket_cap_mb=1)
    ddp.register_comm_hook(timer, comm.CommTimer.hook)
    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own tokens
    shapes = [list(p.shape) for p in direct_parameters(model) if p.dim() == 2]  # 12 + the table
    updates, copies = [], []
    for _ in range(UPDATES):
        for micro in range(micro_batches):
            last = micro == micro_batches - 1
            ids = torch.randint(1, 1000, (4, 12), generator=generator)
            mask = (torch.arange(12) < torch.randint(6, 13, (4, 1), generator=generator)).long()
            labels = torch.randint(0, 2, (4,), generator=generator)
            context = ddp.no_sync() if micro < micro_batches - 1 else torch.enable_grad()
            with context:
                loss = ddp(input_ids=ids, attention_mask=mask, labels=labels).loss
            with torch.profiler.profile(record_shapes=True) if last else contextlib.nullcontext() as profile:
                loss.backward()
        updates.append({name: p.grad.clone() for name, p in model.named_parameters()})
        copies.append(sum(1 for event in profile.events() if event.name == "aten::copy_"
                          and event.input_shapes[:2] in ([s, s] for s in shapes)))
        model.zero_grad(set_to_none=True)  # as the training loop does after each update
    return updates, copies


def direct_parameters(model) -> list[torch.Tensor]:
    linears = [m for m in model.encoder.modules() if type(m) is torch.nn.Linear]
    return [p for m in linears for p in (m.weight, m.bias)] + [model.get_input_embeddings().weight]


def worker(rank: int, init: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    node, why = node_allreduce.create(60.0)
    assert node is not None, why
    try:
        for micro_batches in (1, 3):
            for bf16 in (False, True):
                torch_path, copied = gradients(rank, micro_batches, bf16, False, node)
                direct, copied_direct = gradients(rank, micro_batches, bf16, True, node)
                equal = [all(torch.equal(a[name], b[name]) for name in a) for a, b in zip(torch_path, direct)]
                results[(rank, micro_batches, bf16)] = (equal, copied, copied_direct)
    finally:
        dist.destroy_process_group()


def test_direct_gradients_are_torchs_bit_for_bit_and_ddp_copies_none(tmp_path):
    results = mp.Manager().dict()
    forked_ranks.spawn(worker, args=(f"file://{tmp_path / 'store'}", results), nprocs=2)
    assert len(results) == 8
    for (rank, micro_batches, bf16), (equal, copied, copied_direct) in sorted(results.items()):
        where = f"rank {rank}, {micro_batches} micro-batches, {'bf16' if bf16 else 'fp32'}"
        assert all(equal), f"{where}: the gradients differ from torch's at updates {equal}"
        # The head's pooler [32, 32] is shaped as a query weight and goes through torch's backward
        # either way: 1 copy. torch's path copies the 12 linear weights and the table too (with
        # accumulation autograd adds the last micro-batch's into .grad instead, and DDP copies none).
        if micro_batches == 1:
            assert all(c == 14 for c in copied), (where, copied)
        assert copied_direct[2:] == [1] * (UPDATES - 2), f"{where}: DDP still copied into its buckets: {copied_direct}"
