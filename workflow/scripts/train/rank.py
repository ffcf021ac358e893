"""DDP training step, one process per rank (started by launch.py/mpirun).

Reads rank and world size from the launcher's environment, joins the
process group (gloo or ccl), trains with AdamW and a linear schedule,
checkpoints every N steps and at each epoch end, resumes from the newest
valid checkpoint, and rank 0 saves the model with save_pretrained.
Writes train_metrics.json and, per rank, an exit status file.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import resource
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import psutil
import torch
import torch.distributed as dist
import transformers
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import get_linear_schedule_with_warmup

from workflow.scripts.train import checkpoint, process_group
from workflow.scripts.launch import ranks as dist_env
from workflow.scripts.common import intel, logs, tasks
from workflow.scripts.common.atomic import atomic_dir, write_json
from workflow.scripts.train.batching import DistributedLengthGroupedSampler, pad_collate
from workflow.scripts.train.comm import CommTimer
from workflow.scripts.common.errors import UserError, run_cli
from workflow.scripts.common.modeling import autocast_for, load_model, load_tokenizer

datasets.disable_progress_bars()
transformers.utils.logging.disable_progress_bar()


@dataclass
class Progress:
    """Where the loop is and what it has done, for logs, checkpoints and metrics."""
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    samples: int = 0
    seconds: float = 0.0
    losses: list = field(default_factory=list)
    resumed_from_step: int | None = None
    position_at_start: int = 0  # samples already trained before this process started
    first_step_at: float | None = None  # wall clock (epoch seconds) when this process's first step ended

    def position(self) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "samples": self.samples,
                "losses": self.losses}


@dataclass
class Trainer:
    """Everything one rank trains with."""
    ddp_model: DDP
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    loader: torch.utils.data.DataLoader
    sampler: DistributedLengthGroupedSampler
    autocast: object
    comm: CommTimer
    total_steps: int


def make_loader(split, batch_size: int, env: dist_env.DistEnv, seed: int, pad_id: int):
    lengths = [len(ids) for ids in split["input_ids"]]
    if not lengths:
        raise UserError("the training split is empty; check data.train")
    sampler = DistributedLengthGroupedSampler(lengths, batch_size, env.rank, env.world_size, seed)
    loader = torch.utils.data.DataLoader(
        split.with_format(None), batch_sampler=sampler, collate_fn=pad_collate(pad_id))
    return loader, sampler


def make_optimizer(model, train: dict, total_steps: int, info: dict | None = None):
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)],
         "weight_decay": train["weight_decay"]},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)],
         "weight_decay": 0.0},
    ]
    # The fused CPU kernel updates all parameters in one pass: measured 4.5x
    # faster than foreach (about 20% of a MiniLM step on one thread).
    optimizer = torch.optim.AdamW(groups, lr=train["learning_rate"], fused=True)
    if info and info.get("ipex"):  # before the scheduler, which wraps optimizer.step
        intel.optimize_training(model, optimizer, intel.torch_dtype(info["precision"]))
    warmup = int(train["warmup_ratio"] * total_steps)
    return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def weights_digest(model) -> str:
    """sha256 of every parameter: equal on all ranks if DDP kept them in sync."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().float().numpy().tobytes())
    return digest.hexdigest()


def fingerprint(cfg: dict, world_size: int) -> str:
    """Checkpoints resume only a run with the same settings and world size."""
    text = json.dumps([cfg["model"], cfg["task"], cfg["train"], world_size], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def format_eta(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(seconds)))


def train_step(t: Trainer, batch) -> torch.Tensor:
    with t.autocast():
        loss = t.ddp_model(**batch).loss
    t.comm.backward(loss)
    t.optimizer.step()
    t.scheduler.step()
    t.optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def mean_over_ranks(value: torch.Tensor) -> torch.Tensor:
    value = value.float().clone()
    dist.all_reduce(value)
    return value / dist.get_world_size()


def check_finite(loss: torch.Tensor, step: int, env: dist_env.DistEnv) -> None:
    if not torch.isfinite(loss):
        raise UserError(
            f"non-finite loss {loss.item()} at step {step} on rank {env.rank} ({socket.gethostname()}); "
            "lower train.learning_rate or check the data"
        )


def log_progress(progress: Progress, loss, t: Trainer, global_batch: int, start: float, log) -> None:
    rate = (progress.samples - progress.position_at_start) / max(time.perf_counter() - start, 1e-9)
    eta = (t.total_steps - progress.step) * global_batch / max(rate, 1e-9)
    log.info(f"step {progress.step}/{t.total_steps} | epoch {progress.epoch + 1} | loss {float(loss):.4f} | "
             f"{rate:.1f} samples/s | ETA {format_eta(eta)}")


def save_checkpoint(t: Trainer, progress: Progress, cfg: dict, env, root: Path, fp: str, log) -> None:
    """All ranks give their RNG state; rank 0 writes the checkpoint."""
    states = [None] * env.world_size
    dist.all_gather_object(states, checkpoint.rng_state())
    if env.is_main:
        folder = checkpoint.save(root, progress.step, progress.position(), fp, t.model, t.optimizer,
                                 t.scheduler, states, cfg["train"]["keep_checkpoints"])
        log.info(f"checkpoint {folder}")
    dist.barrier()


def resume(t: Trainer, progress: Progress, env, root: Path, fp: str, log) -> None:
    """Continue from the newest valid checkpoint of the same settings, if any."""
    found = [checkpoint.newest(root, fp) if env.is_main else None]
    dist.broadcast_object_list(found)
    if found[0] is None:
        return
    payload = [checkpoint.read(found[0]) if env.is_main else None]
    dist.broadcast_object_list(payload)  # rank 0's disk decides; no shared filesystem needed
    state = payload[0]
    t.model.load_state_dict(state["model"])
    t.optimizer.load_state_dict(state["optimizer"])
    t.scheduler.load_state_dict(state["scheduler"])
    checkpoint.set_rng_state(state["rng"][env.rank])
    meta = state["meta"]
    progress.step = progress.resumed_from_step = meta["step"]
    progress.epoch, progress.batch_in_epoch = meta["epoch"], meta["batch_in_epoch"]
    progress.samples, progress.losses = meta["samples"], meta["losses"]
    log.info(f"resumed from {found[0]} (step {progress.step})")


def run_epochs(t: Trainer, progress: Progress, cfg: dict, env, ckpt_root: Path, fp: str, log) -> None:
    """The training loop, from wherever `progress` says it is."""
    train_cfg = cfg["train"]
    global_batch = train_cfg["batch_size"] * env.world_size
    every = train_cfg["checkpoint_every"]
    progress.position_at_start = progress.samples
    t.ddp_model.train()
    start = time.perf_counter()
    while progress.step < t.total_steps:
        t.sampler.set_epoch(progress.epoch, start=progress.batch_in_epoch)  # the order is seeded per epoch
        for index, batch in enumerate(t.loader, start=progress.batch_in_epoch):
            loss = train_step(t, batch)
            progress.first_step_at = progress.first_step_at or time.time()
            progress.step += 1
            progress.batch_in_epoch = index + 1
            progress.samples += global_batch
            if progress.step % train_cfg["log_every"] == 0 or progress.step == t.total_steps:
                loss = mean_over_ranks(loss)  # every rank sees the same value and stops together
                check_finite(loss, progress.step, env)
                progress.losses.append([progress.step, float(loss)])
                log_progress(progress, loss, t, global_batch, start, log)
            if progress.step >= t.total_steps:
                break
            if every and progress.step % every == 0 and progress.batch_in_epoch < len(t.sampler):
                save_checkpoint(t, progress, cfg, env, ckpt_root, fp, log)
        else:
            progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
            if progress.step < t.total_steps:
                save_checkpoint(t, progress, cfg, env, ckpt_root, fp, log)
    progress.seconds = time.perf_counter() - start


def final_loss(progress: Progress) -> float:
    """Mean loss (over ranks) of the last few logging points."""
    recent = [loss for _, loss in progress.losses[-5:]] or [float("nan")]
    return sum(recent) / len(recent)


def rank_record(env, model, threads: int, comm: CommTimer) -> dict:
    return {
        "rank": env.rank,
        "host": socket.gethostname(),
        "local_rank": env.local_rank,
        "torch_threads": threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "allreduce_wait_share": comm.wait_share(),
        "weights_sha256": weights_digest(model),
    }


def save_model(model, tokenizer, out_dir) -> None:
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)


def build(cfg: dict, info: dict, data_dir: str, env, log) -> tuple[Trainer, object]:
    task = tasks.get_task(cfg["task"])
    train_cfg = cfg["train"]
    torch.manual_seed(train_cfg["seed"])  # identical init; DDP broadcasts rank 0's anyway
    tokenizer = load_tokenizer(cfg["model"], cfg["trust_remote_code"])
    model = load_model(cfg["model"], task, cfg["trust_remote_code"], tokenizer)
    torch.manual_seed(train_cfg["seed"] + env.rank)  # different dropout per rank
    split = datasets.load_from_disk(data_dir)["train"]
    loader, sampler = make_loader(split, train_cfg["batch_size"], env, train_cfg["seed"], tokenizer.pad_token_id)
    total_steps = math.ceil(train_cfg["epochs"] * len(sampler))
    if train_cfg["max_steps"]:
        total_steps = min(total_steps, train_cfg["max_steps"])
    optimizer, scheduler = make_optimizer(model, train_cfg, total_steps, info)
    if info.get("ipex"):
        log.info(f"IPEX optimized the model for training ({info['precision']}): "
                 f"{intel.ipex_modules(model)} modules replaced")
    comm = CommTimer()
    ddp_model = DDP(model, gradient_as_bucket_view=True)
    ddp_model.register_comm_hook(comm, CommTimer.hook)
    log.info(f"{len(split)} training features, {len(sampler)} steps per epoch, {total_steps} steps, "
             f"global batch {train_cfg['batch_size']} x {env.world_size}")
    trainer = Trainer(ddp_model, model, optimizer, scheduler, loader, sampler,
                      autocast_for(info["precision"]), comm, total_steps)
    return trainer, tokenizer


def metrics_record(cfg, info, env, progress: Progress, t: Trainer, ranks: list) -> dict:
    trained = progress.samples - progress.position_at_start
    return {
        "world_size": env.world_size,
        "backend": info["backend"],
        "precision": info["precision"],
        "ipex": bool(info.get("ipex")),
        "threads_per_process": int(info["threads_per_process"]),
        "epochs": cfg["train"]["epochs"],
        "steps": progress.step,
        "steps_per_epoch": len(t.sampler),
        "train_samples": progress.samples,
        "train_seconds": round(progress.seconds, 3),
        "train_samples_per_second": round(trained / max(progress.seconds, 1e-9), 3),
        "final_loss": final_loss(progress),
        "resumed_from_step": progress.resumed_from_step,
        # Startup: rank 0's process start and first finished step (epoch seconds).
        "process_started_at": round(psutil.Process().create_time(), 3),
        "first_step_at": progress.first_step_at and round(progress.first_step_at, 3),
        "allreduce_wait_share": round(sum(r["allreduce_wait_share"] for r in ranks) / len(ranks), 4),
        "peak_rss_mb_per_rank": [r["peak_rss_mb"] for r in ranks],
        "loss_history": progress.losses,
        "ranks": ranks,
    }


def train_and_save(cfg: dict, info: dict, data_dir: str, out_dir: Path, env, log) -> None:
    """Build, train and save; everything that holds the process group is a
    local here, released when this returns (before the group is left)."""
    threads = int(info["threads_per_process"])
    t, tokenizer = build(cfg, info, data_dir, env, log)
    ckpt_root, fp = out_dir / "checkpoints", fingerprint(cfg, env.world_size)
    progress = Progress()
    resume(t, progress, env, ckpt_root, fp, log)
    run_epochs(t, progress, cfg, env, ckpt_root, fp, log)
    ranks = [None] * env.world_size
    dist.all_gather_object(ranks, rank_record(env, t.model, threads, t.comm))
    if env.is_main:
        record = metrics_record(cfg, info, env, progress, t, ranks)
        model = intel.plain_model(t.model) if info.get("ipex") else t.model  # fp32, not IPEX's bf16
        save_model(model, tokenizer, out_dir / "model")
        write_json(out_dir / "train_metrics.json", record)
        shutil.rmtree(ckpt_root, ignore_errors=True)  # only a failed run needs them
        log.info(f"done: {progress.step} steps in {progress.seconds:.1f}s, "
                 f"{record['train_samples_per_second']:.1f} samples/s, final loss {record['final_loss']:.4f}, "
                 f"all-reduce wait {100 * record['allreduce_wait_share']:.1f}% of step time")
    dist.barrier()  # the last collective: every rank's results are complete after it


def train(cfg: dict, info: dict, data_dir: str, out_dir: Path, log_dir: str, status: logs.RankStatus) -> None:
    env = dist_env.read()
    log = logs.setup(log_dir, env.rank)
    threads = int(info["threads_per_process"])
    torch.set_num_threads(threads)
    log.info(f"rank {env.rank}/{env.world_size} via {env.launcher}; backend {info['backend']}; "
             f"precision {info['precision']}; {threads} threads (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})")
    log.info(intel.prepare_rank(info))  # every node checks its own versions
    dist_cfg = cfg["distributed"]
    with process_group.joined(info["backend"], env.rank, env.world_size, dist_cfg["timeout_minutes"]):
        train_and_save(cfg, info, data_dir, out_dir, env, log)
        # A rank's own bound on teardown, a little after the launcher's.
        status.trained(exit_within=dist_cfg["exit_grace_seconds"] + 10)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="run configuration JSON")
    parser.add_argument("--environment", required=True, help="environment.json of the run")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--out", required=True, help="run folder: model/, train_metrics.json, checkpoints/")
    parser.add_argument("--log-dir", required=True, help="folder for rank<N>.log and rank<N>.exit")
    args = parser.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    info = json.loads(Path(args.environment).read_text())
    with logs.exit_status(args.log_dir, dist_env.read().rank) as status:
        train(cfg, info, args.data, Path(args.out), args.log_dir, status)


if __name__ == "__main__":
    run_cli(main)
