"""The training step of one rank (started by the launcher on every rank).

    python -m workflow.scripts.train.rank --config C --environment E --data D --out RUN --log-dir LOGS

Reads its rank from the launcher's environment, joins the process group
(gloo or ccl), trains (loop.py) with checkpoints and resume, and rank 0
saves the model with save_pretrained and writes train_metrics.json. Every
rank keeps a status file (common/logs.py) that the launcher reads.

A finished training is never lost: the loop ends with a checkpoint at the
last step; after it every rank is done, and rank 0 writes the model and the
metrics (fsynced, renamed into place), waits for every rank once more, and
only then removes the checkpoints. A retry after a failure in that window
resumes at the last step, trains nothing and saves the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import resource
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
import transformers

from workflow.scripts.common import card, logs

from workflow.scripts.settings import step

from workflow.scripts.probes import hardware, intel
from workflow.scripts.common.atomic import atomic_dir, write_json
from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.settings.views import TrainView
from workflow.scripts.launch import ranks
from workflow.scripts.launch.ranks import DistEnv
from workflow.scripts.train import fault_point, fingerprint, lora, loop, process_group, step_phases, tracking
from workflow.scripts.train.comm import CommTimer
from workflow.scripts.train.step_phases import StepPhases
from workflow.scripts.train.preempt import StopRequests
from workflow.scripts.train.checkpoint import Checkpointer
from workflow.scripts.train.evaluation import Evaluator
from workflow.scripts.train.state import Progress, TrainingState, build

transformers.utils.logging.disable_progress_bar()


def weights_digest(model) -> str:
    """sha256 of every parameter: equal on all ranks if DDP kept them in sync."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().float().numpy().tobytes())
    return digest.hexdigest()


def rows_updated_share(optimizer) -> float | None:
    """The share of the embedding tables' rows the one-pass AdamW updated
    (MasterAdamW.active_rows), over the run; None where it updates them all."""
    updated, rows = getattr(optimizer, "rows_updated", (0, 0))
    return round(updated / rows, 4) if rows else None


def rank_record(env: DistEnv, model, threads: int, comm: CommTimer, optimizer, phases: StepPhases) -> dict:
    return {
        "rank": env.rank,
        "host": socket.gethostname(),
        "local_rank": env.local_rank,
        "torch_threads": threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus": hardware.cpu_list(),  # as bound by pin.py or the launcher (srun --cpu-bind)
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "allreduce_wait_share": comm.wait_share(),
        **comm.counts(),
        "embedding_rows_updated_share": rows_updated_share(optimizer),
        "step_split": comm.step_split(),
        "step_phases": phases.record(),  # train/step_phases.py
        "weights_sha256": weights_digest(model),
        "process_group": process_group.describe(),
    }


def save_model(model, tokenizer, out_dir) -> None:
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)


def metrics_record(cfg: TrainView, decisions: RunDecisions, env: DistEnv, progress: Progress, t: TrainingState,
                   ranks: list) -> dict:
    trained = progress.samples - progress.position_at_start
    return {
        "world_size": env.world_size,
        "backend": decisions.backend,
        "process_group_backend": ranks[0]["process_group"]["backend"],
        "precision": decisions.precision,
        "ipex": decisions.ipex,
        "threads_per_process": decisions.threads_per_process,
        "epochs": cfg.train.epochs,
        "batch_size_per_rank": cfg.train.batch_size,
        "gradient_accumulation_steps": t.sampler.accumulation,
        "global_batch": t.sampler.global_size,
        "bucket_cap_mb": cfg.distributed.bucket_cap_mb,
        "gradient_compression": t.comm.compression,
        "steps": progress.step,
        "steps_per_epoch": len(t.sampler),
        "train_samples": progress.samples,
        "train_seconds": round(progress.seconds, 3),
        "train_samples_per_second": round(trained / max(progress.seconds, 1e-9), 3),
        "steady_samples_per_second": progress.steady_samples_per_second,  # after loop.WARMUP_STEPS steps
        "final_loss": loop.final_loss(progress),
        "resumed_from_step": progress.resumed_from_step,
        **t.choice.as_dict(),  # whose model code trained (train/model_code.py), and why
        # Startup: the start of rank 0's process that trained and its first finished step (epoch seconds).
        "process_started_at": round(progress.started_at or psutil.Process().create_time(), 3),
        "first_step_at": progress.first_step_at and round(progress.first_step_at, 3),
        "allreduce_wait_share": round(sum(r["allreduce_wait_share"] for r in ranks) / len(ranks), 4),
        "peak_rss_mb_per_rank": [r["peak_rss_mb"] for r in ranks],
        "loss_history": progress.losses,
        "ranks": ranks,
    }


@dataclass(frozen=True)
class Job:
    """What this rank is asked to do: the settings, the decisions of the
    environment check, the tokenized data, and the run folder."""
    cfg: TrainView
    decisions: RunDecisions
    data_dir: str
    out_dir: Path
    raw_dir: str | None = None  # the raw data: evaluation during training of a QA task needs the contexts


def train_and_save(job: Job, env: DistEnv, log, status: logs.RankStatus) -> None:
    """Build, train and save; everything that holds the process group is a
    local here, released when this returns (before the group is left)."""
    cfg, decisions, data_dir, out_dir = job.cfg, job.decisions, job.data_dir, job.out_dir
    log.info(f"process group: {process_group.describe()}")
    t, tokenizer = build(cfg, decisions, data_dir, env, log)
    parts = fingerprint.of(cfg, decisions, data_dir, t.sampler.global_size, t.choice.code) if env.is_main else None
    checkpoints = Checkpointer(out_dir / "checkpoints", parts, cfg.train.keep_checkpoints, env.rank,
                               env.world_size, log)
    progress = Progress()
    evaluator = Evaluator(cfg, data_dir, job.raw_dir, tokenizer.pad_token_id, env.rank, log)
    log.info(evaluator.line())
    checkpoints.keep_best = evaluator.keep_best
    checkpoints.resume(t, progress)
    # From here a SIGTERM means "checkpoint, then stop" rather than "stop now";
    # the status says so only once the handler is in place.
    stops = StopRequests()
    status.write("running", resumed_from_step=progress.resumed_from_step)
    params = tracking.run_params(cfg, decisions, env.world_size, t.choice.as_dict())
    with tracking.opened(cfg.report, out_dir, params, log, main=env.is_main), \
            process_group.steps(decisions.backend, cfg.distributed.timeout_minutes):  # trackers; the steps' timeout
        loop.run_epochs(t, progress, checkpoints, log, stops, evaluator)  # ends with a checkpoint at the last step
    gathered = [None] * env.world_size  # the final barrier: every rank has trained
    dist.all_gather_object(gathered, rank_record(env, t.model, decisions.threads_per_process, t.comm,
                                                t.optimizer, t.phases))
    fault_point.reach("final-save", env.rank)
    if env.is_main:
        if evaluator.keep_best and progress.best and progress.best["step"] != progress.step:
            checkpoints.load_best(t, progress.best["step"])  # train.best_model: the best is the model
        save_results(job, env, progress, t, tokenizer, gathered, log, evaluator.summary(progress))
    else:
        status.write("trained")  # nothing of its own to write: done once rank 0 has the model
    dist.barrier()  # the last collective: the model is in place and every rank is done
    if env.is_main:
        status.write("trained")  # first: a failure while the checkpoints go can no longer fail the run
        checkpoints.clear()


def save_results(job: Job, env: DistEnv, progress: Progress, t: TrainingState, tokenizer, gathered: list,
                 log, evaluation: dict | None = None) -> None:
    """Rank 0: the model, then train_metrics.json, each fsynced and renamed into place.
    `evaluation`: evaluation during training (train/evaluation.py), None when off."""
    cfg, decisions, out_dir = job.cfg, job.decisions, job.out_dir
    record = {**metrics_record(cfg, decisions, env, progress, t, gathered), "evaluation": evaluation}
    model = intel.plain_model(t.model) if decisions.ipex else t.saved_model()  # fp32, not bf16
    adapters = lora.described(t.model, cfg.train.lora)  # the card's LoRA table, before merging
    model = lora.saved(model, cfg.train.lora)  # train.lora: merged (default) or peft's adapter folder
    save_model(model, tokenizer, out_dir / "model")
    card.write_train_card(out_dir / "model", cfg, decisions, hardware.cpu_summary(), evaluation, progress.step,
                          adapters)  # README.md
    write_json(out_dir / "train_metrics.json", record)
    log.info(f"done: {progress.step} steps in {progress.seconds:.1f}s, "
             f"{record['train_samples_per_second']:.1f} samples/s, final loss {record['final_loss']:.4f}, "
             f"all-reduce wait {100 * record['allreduce_wait_share']:.1f}% of step time")
    if record["ranks"][0]["step_phases"]["updates"]:  # this rank's, as gathered
        log.info(f"rank 0's update: {step_phases.describe(record['ranks'][0]['step_phases'])}")


def train(cfg: TrainView, decisions: RunDecisions, data_dir: str, out_dir: Path, log_dir: str,
          status: logs.RankStatus, raw_dir: str | None = None) -> None:
    env = ranks.read()
    log = logs.setup(log_dir, env.rank)
    torch.set_num_threads(decisions.threads_per_process)
    log.info(f"rank {env.rank}/{env.world_size} via {env.launcher}; backend {decisions.backend}; "
             f"precision {decisions.precision}; {decisions.threads_per_process} threads "
             f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}) on CPUs {hardware.cpu_list()}")
    log.info(intel.prepare_rank(decisions.as_dict()))  # every node checks its own versions
    dist_cfg = cfg.distributed
    with process_group.joined(decisions.backend, env, dist_cfg.timeout_minutes):
        train_and_save(Job(cfg, decisions, data_dir, out_dir, raw_dir), env, log, status)
        # A rank's own bound on teardown, a little after the launcher's.
        status.trained(exit_within=dist_cfg.exit_grace_seconds + 10)


def main(argv=None) -> None:
    parser = step.parser(__doc__, environment=True)
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--raw", help="raw DatasetDict folder (evaluation during training of a QA task)")
    parser.add_argument("--out", required=True, help="run folder: model/, train_metrics.json, checkpoints/")
    parser.add_argument("--log-dir", required=True, help="folder for rank<N>.log and rank<N>.exit")
    args = parser.parse_args(argv)
    with logs.exit_status(args.log_dir, ranks.read().rank) as status:
        config, decisions = step.read_view(args, TrainView), step.read_decisions(args)
        config = dataclasses.replace(config, train=decisions.recipe(config.train))  # a measured layout's split
        train(config, decisions, args.data, Path(args.out), args.log_dir, status, args.raw)


if __name__ == "__main__":
    step.entry(main)
