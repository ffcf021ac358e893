"""The row-sparse all-reduce of the word embedding (train.speed.
embedding_allreduce: rows) gives the dense all-reduce's gradients bit for
bit, on two real gloo ranks with different batches, with and without
gradient accumulation, and sends only the rows some rank touched; so does
a word-embedding gradient table reused across updates (train.speed.
embedding_grad: reuse, cpuddp's encoder), alone and with the rows."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import BertConfig, BertForSequenceClassification

from helpers import forked_ranks
from workflow.scripts.train import comm, encoder, speed

CONFIG = BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)


UPDATES = 2  # the second update is the one a reused gradient table could spoil


def gradients(rank: int, rows: bool, micro_batches: int, reuse: bool = False) -> tuple[list[dict], list[int]]:
    torch.manual_seed(0)  # the same weights on both ranks
    model, _ = encoder.build(BertForSequenceClassification(CONFIG), "classification", hash_dropout=False)
    pool = speed.GradPool()  # with reuse, it also tells the row all-reduce which rows this rank used
    if reuse:  # as speed.apply chooses it for cpuddp's encoder
        model.use_grad_pool(pool)
    timer = comm.CommTimer("none", rows_of=model.get_input_embeddings().weight if rows else None, touched=pool)
    ddp = DDP(model, gradient_as_bucket_view=True, bucket_cap_mb=1)
    ddp.register_comm_hook(timer, comm.CommTimer.hook)
    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own tokens
    updates = []
    for _ in range(UPDATES):
        for micro in range(micro_batches):
            ids = torch.randint(1, 1000, (4, 12), generator=generator)
            labels = torch.randint(0, 2, (4,), generator=generator)
            context = ddp.no_sync() if micro < micro_batches - 1 else torch.enable_grad()
            with context:
                ddp(input_ids=ids, labels=labels).loss.backward()
        updates.append({name: p.grad.clone() for name, p in model.named_parameters()})
        model.zero_grad(set_to_none=True)  # as the training loop does after each update
    return updates, timer.rows_sent


def worker(rank: int, init: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        for micro_batches in (1, 3):
            dense, _ = gradients(rank, False, micro_batches)
            tables = [update["encoder.embeddings.word.weight"] for update in dense]
            touched = [int(t.ne(0).any(dim=1).sum()) for t in tables]  # after the all-reduce: the union over ranks
            for rows, reuse in ((True, False), (False, True), (True, True)):
                other, sent = gradients(rank, rows, micro_batches, reuse)
                equal = all(torch.equal(d[name], o[name]) for d, o in zip(dense, other) for name in d)
                results[(rank, micro_batches, rows, reuse)] = (equal, touched, tables[0].shape[0], sent)
    finally:
        dist.destroy_process_group()


def test_rows_and_a_reused_table_give_the_dense_gradients_bit_for_bit(tmp_path):
    results = mp.Manager().dict()
    forked_ranks.spawn(worker, args=(f"file://{tmp_path / 'store'}", results), nprocs=2)
    for (rank, micro_batches, rows, reuse), (equal, touched, table, sent) in sorted(results.items()):
        assert equal, f"rank {rank}, {micro_batches} micro-batches, rows {rows}, reuse {reuse}: gradients differ"
        assert all(0 < t < table // 4 for t in touched), (touched, table)  # a sparse table: the case for both
        if rows:  # one row all-reduce per update, of exactly the touched rows
            assert sent == [UPDATES, sum(touched), UPDATES * table], sent
    assert len(results) == 12
