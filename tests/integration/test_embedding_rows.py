"""The row-sparse all-reduce of the word embedding (train.speed.
embedding_allreduce: rows) gives the dense all-reduce's gradients bit for
bit, on two real gloo ranks with different batches, with and without
gradient accumulation, and sends only the rows some rank touched."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import BertConfig, BertForSequenceClassification

from workflow.scripts.train import comm

CONFIG = BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)


def gradients(rank: int, rows: bool, micro_batches: int) -> tuple[dict[str, torch.Tensor], list[int]]:
    torch.manual_seed(0)  # the same weights on both ranks
    model = BertForSequenceClassification(CONFIG)
    timer = comm.CommTimer("none", rows_of=model.get_input_embeddings().weight if rows else None)
    ddp = DDP(model, gradient_as_bucket_view=True, bucket_cap_mb=1)
    ddp.register_comm_hook(timer, comm.CommTimer.hook)
    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own tokens
    for micro in range(micro_batches):
        ids = torch.randint(1, 1000, (4, 12), generator=generator)
        labels = torch.randint(0, 2, (4,), generator=generator)
        context = ddp.no_sync() if micro < micro_batches - 1 else torch.enable_grad()
        with context:
            ddp(input_ids=ids, labels=labels).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}, timer.rows_sent


def worker(rank: int, init: str, results: dict) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        for micro_batches in (1, 3):
            (dense, _), (rows, sent) = gradients(rank, False, micro_batches), gradients(rank, True, micro_batches)
            table = dense["bert.embeddings.word_embeddings.weight"]
            touched = int(table.ne(0).any(dim=1).sum())  # after the all-reduce: the union over ranks
            equal = all(torch.equal(dense[name], rows[name]) for name in dense)
            results[(rank, micro_batches)] = (equal, touched, table.shape[0], sent)
    finally:
        dist.destroy_process_group()


def test_rows_give_the_dense_gradients_bit_for_bit(tmp_path):
    results = mp.Manager().dict()
    mp.spawn(worker, args=(f"file://{tmp_path / 'store'}", results), nprocs=2, join=True)
    for (rank, micro_batches), (equal, touched, rows, sent) in sorted(results.items()):
        assert equal, f"rank {rank}, {micro_batches} micro-batches: the row all-reduce differs from the dense one"
        assert 0 < touched < rows // 4, (touched, rows)  # a sparse table: the case the lever is for
        assert sent == [1, touched, rows], sent  # one row all-reduce per update, of exactly the touched rows
    assert len(results) == 4
