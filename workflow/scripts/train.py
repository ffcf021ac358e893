"""DDP training step, one process per rank (started by launch.py/mpirun).

Reads rank and world size from the launcher's environment, joins the
process group (gloo or ccl), trains with AdamW and a linear schedule, and
rank 0 saves the model with save_pretrained. Writes train_metrics.json.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import resource
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import torch.distributed as dist
import transformers
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import AutoTokenizer, get_linear_schedule_with_warmup

from workflow.scripts import dist_env, logs, tasks
from workflow.scripts.atomic import atomic_dir, write_json
from workflow.scripts.batching import DistributedLengthGroupedSampler, pad_collate
from workflow.scripts.errors import UserError, run_cli
from workflow.scripts.modeling import autocast_for, load_model

datasets.disable_progress_bars()
transformers.utils.logging.disable_progress_bar()


@dataclass
class Progress:
    """What the loop has done so far, for logs and train_metrics.json."""
    step: int = 0
    samples: int = 0
    seconds: float = 0.0
    losses: list = field(default_factory=list)


def init_distributed(backend: str, env: dist_env.DistEnv, timeout_minutes: float) -> None:
    if backend == "ccl":
        import oneccl_bindings_for_pytorch  # noqa: F401  registers the ccl backend
    dist.init_process_group(
        backend, rank=env.rank, world_size=env.world_size,
        timeout=datetime.timedelta(minutes=timeout_minutes),
    )


def make_loader(split, batch_size: int, env: dist_env.DistEnv, seed: int, pad_id: int):
    lengths = [len(ids) for ids in split["input_ids"]]
    sampler = DistributedLengthGroupedSampler(lengths, batch_size, env.rank, env.world_size, seed)
    loader = torch.utils.data.DataLoader(
        split.with_format(None), batch_sampler=sampler, collate_fn=pad_collate(pad_id))
    return loader, sampler


def make_optimizer(model, train: dict, total_steps: int):
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)],
         "weight_decay": train["weight_decay"]},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)],
         "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=train["learning_rate"], foreach=True)
    warmup = int(train["warmup_ratio"] * total_steps)
    return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def weights_digest(model) -> str:
    """sha256 of every parameter: equal on all ranks if DDP kept them in sync."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().float().numpy().tobytes())
    return digest.hexdigest()


def format_eta(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(seconds)))


def train_step(ddp_model, batch, optimizer, scheduler, autocast) -> torch.Tensor:
    with autocast():
        loss = ddp_model(**batch).loss
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def check_finite(loss: torch.Tensor, step: int, env: dist_env.DistEnv) -> None:
    if not torch.isfinite(loss):
        raise UserError(
            f"non-finite loss {loss.item()} at step {step} on rank {env.rank} ({socket.gethostname()}); "
            "lower train.learning_rate or check the data"
        )


def run_epochs(ddp_model, loader, sampler, optimizer, scheduler, autocast, total_steps, cfg, env, log):
    """The training loop; returns what it did."""
    progress = Progress()
    global_batch = cfg["train"]["batch_size"] * env.world_size
    log_every = cfg["train"]["log_every"]
    ddp_model.train()
    start = time.perf_counter()
    epoch = 0
    while progress.step < total_steps:
        sampler.set_epoch(epoch)
        for batch in loader:
            loss = train_step(ddp_model, batch, optimizer, scheduler, autocast)
            progress.step += 1
            progress.samples += global_batch
            if progress.step % log_every == 0 or progress.step == total_steps:
                loss = mean_over_ranks(loss)  # every rank sees the same value and stops together
                check_finite(loss, progress.step, env)
                progress.losses.append([progress.step, float(loss)])
                elapsed = time.perf_counter() - start
                rate = progress.samples / elapsed
                log.info(f"step {progress.step}/{total_steps} | epoch {epoch + 1} | loss {float(loss):.4f} | "
                         f"{rate:.1f} samples/s | ETA {format_eta((total_steps - progress.step) * global_batch / rate)}")
            if progress.step >= total_steps:
                break
        epoch += 1
    progress.seconds = time.perf_counter() - start
    return progress


def mean_over_ranks(value: torch.Tensor) -> torch.Tensor:
    value = value.float().clone()
    dist.all_reduce(value)
    return value / dist.get_world_size()


def final_loss(progress: Progress) -> float:
    """Mean loss (over ranks) of the last few logging points."""
    recent = [loss for _, loss in progress.losses[-5:]] or [float("nan")]
    return sum(recent) / len(recent)


def rank_record(env, model, threads: int) -> dict:
    return {
        "rank": env.rank,
        "host": socket.gethostname(),
        "local_rank": env.local_rank,
        "torch_threads": threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "weights_sha256": weights_digest(model),
    }


def save_model(model, tokenizer, out_dir) -> None:
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)


def train(cfg: dict, info: dict, data_dir: str, out_dir: Path, log_dir: str) -> None:
    env = dist_env.read()
    log = logs.setup(log_dir, env.rank)
    threads = int(info["threads_per_process"])
    torch.set_num_threads(threads)
    log.info(f"rank {env.rank}/{env.world_size} via {env.launcher}; backend {info['backend']}; "
             f"precision {info['precision']}; {threads} threads (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})")
    init_distributed(info["backend"], env, cfg["distributed"]["timeout_minutes"])
    try:
        task = tasks.get_task(cfg["task"])
        train_cfg = cfg["train"]
        torch.manual_seed(train_cfg["seed"])  # identical init; DDP broadcasts rank 0's anyway
        tokenizer = AutoTokenizer.from_pretrained(cfg["model"], trust_remote_code=cfg["trust_remote_code"])
        model = load_model(cfg["model"], task, cfg["trust_remote_code"])
        torch.manual_seed(train_cfg["seed"] + env.rank)  # different dropout per rank
        split = datasets.load_from_disk(data_dir)["train"]
        loader, sampler = make_loader(split, train_cfg["batch_size"], env, train_cfg["seed"], tokenizer.pad_token_id)
        steps_per_epoch = len(sampler)
        total_steps = math.ceil(train_cfg["epochs"] * steps_per_epoch)
        if train_cfg["max_steps"]:
            total_steps = min(total_steps, train_cfg["max_steps"])
        optimizer, scheduler = make_optimizer(model, train_cfg, total_steps)
        ddp_model = DDP(model)
        autocast = autocast_for(info["precision"])
        log.info(f"{len(split)} training features, {steps_per_epoch} steps per epoch, {total_steps} steps, "
                 f"global batch {train_cfg['batch_size']} x {env.world_size}")
        progress = run_epochs(ddp_model, loader, sampler, optimizer, scheduler, autocast, total_steps, cfg, env, log)
        loss = final_loss(progress)
        ranks = [None] * env.world_size
        dist.all_gather_object(ranks, rank_record(env, model, threads))
        if env.is_main:
            save_model(model, tokenizer, out_dir / "model")
            write_json(out_dir / "train_metrics.json", {
                "world_size": env.world_size,
                "backend": info["backend"],
                "precision": info["precision"],
                "threads_per_process": threads,
                "epochs": train_cfg["epochs"],
                "steps": progress.step,
                "steps_per_epoch": steps_per_epoch,
                "train_samples": progress.samples,
                "train_seconds": round(progress.seconds, 3),
                "train_samples_per_second": round(progress.samples / progress.seconds, 3),
                "final_loss": loss,
                "loss_history": progress.losses,
                "ranks": ranks,
            })
            log.info(f"done: {progress.step} steps in {progress.seconds:.1f}s, "
                     f"{progress.samples / progress.seconds:.1f} samples/s, final loss {loss:.4f}")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="run configuration JSON")
    parser.add_argument("--environment", required=True, help="environment.json of the run")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--out", required=True, help="run folder: model/ and train_metrics.json")
    parser.add_argument("--log-dir", required=True, help="folder for rank<N>.log")
    args = parser.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    info = json.loads(Path(args.environment).read_text())
    train(cfg, info, args.data, Path(args.out), args.log_dir)


if __name__ == "__main__":
    run_cli(main)
