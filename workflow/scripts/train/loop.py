"""The training loop of one rank: steps, progress lines, checkpoints, and
resuming from the newest valid checkpoint of the same settings."""

from __future__ import annotations

import contextlib
import datetime
import socket
import time

import psutil
import torch
import torch.distributed as dist

from workflow.scripts.common.errors import Preempted, UserError
from workflow.scripts.data.batching import updates
from workflow.scripts.train import tracking
from workflow.scripts.train.checkpoint import Checkpointer
from workflow.scripts.train.evaluation import Evaluator
from workflow.scripts.train.preempt import StopRequests
from workflow.scripts.train.state import Progress, TrainingState
from workflow.scripts.train.step_phases import WARMUP_STEPS


def train_step(t: TrainingState, micro_batches: list) -> torch.Tensor:
    """One update from `accumulation` micro-batches: the gradients of every
    micro-batch but the last stay local (no_sync), and each loss is divided
    by their count, so the update equals that of one batch holding them all
    (the micro-batches are of equal size)."""
    total = torch.zeros(())
    phases = t.phases
    phases.begin(micro_batches)
    t.comm.begin_update()
    for i, batch in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else t.ddp_model.no_sync(), t.autocast():
            loss = t.ddp_model(**batch).loss / len(micro_batches)
        phases.lap("forward")
        t.comm.backward(loss)
        phases.lap("backward", less=t.comm.last_waited)
        total += loss.detach().float()
    if t.max_grad_norm > 0:  # after the last micro-batch's all-reduce: every rank clips the same mean gradient
        tracking.keep_grad_norm(t.clip_gradients())
        phases.lap("clip")
    with t.flush_denormals():
        t.optimizer.step()
    t.scheduler.step()
    t.optimizer.zero_grad(set_to_none=True)
    phases.lap("optimizer")
    phases.end()
    return total


def mean_over_ranks(value: torch.Tensor) -> torch.Tensor:
    value = value.float().clone()
    dist.all_reduce(value)
    return value / dist.get_world_size()


def check_finite(loss: torch.Tensor, step: int, rank: int) -> None:
    if not torch.isfinite(loss):
        raise UserError(
            f"non-finite loss {loss.item()} at step {step} on rank {rank} ({socket.gethostname()}); "
            "lower train.learning_rate or check the data"
        )


def format_eta(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(seconds)))


def log_progress(progress: Progress, loss, t: TrainingState, global_batch: int, start: float, log) -> None:
    rate = (progress.samples - progress.position_at_start) / max(time.perf_counter() - start, 1e-9)
    eta = (t.total_steps - progress.step) * global_batch / max(rate, 1e-9)
    log.info(f"step {progress.step}/{t.total_steps} | epoch {progress.epoch + 1} | loss {float(loss):.4f} | "
             f"{rate:.1f} samples/s | ETA {format_eta(eta)}")
    tracking.log_step(progress.step, loss, t.scheduler.get_last_lr()[0], rate)  # report.trackers, rank 0


def mark_warm(progress: Progress, steps_here: int, evaluator: Evaluator) -> None:
    """The clock, samples and evaluation time once this process's warm-up steps are done."""
    if steps_here == WARMUP_STEPS:
        progress.warm = (time.perf_counter(), progress.samples, evaluator.seconds)


def steady_rate(progress: Progress, evaluator: Evaluator) -> float | None:
    """Training samples/s after the warm-up steps (None when none followed them)."""
    if progress.warm is None or progress.samples <= progress.warm[1]:
        return None
    at, samples, evaluating = progress.warm
    seconds = time.perf_counter() - at - (evaluator.seconds - evaluating)
    return round((progress.samples - samples) / max(seconds, 1e-9), 3)


def run_epochs(t: TrainingState, progress: Progress, checkpoints: Checkpointer, log,
               stops: StopRequests | None = None, evaluator: Evaluator | None = None) -> None:
    """The training loop, from wherever `progress` says it is; on a stop
    request, a checkpoint at the update boundary, then Preempted. It ends
    with a checkpoint at the last step (a failure while the model is saved
    then costs no training); resumed there, it trains nothing and keeps
    the measures of the try that trained. With an evaluator (evaluation.every)
    it evaluates as it goes and at the last step, and may stop early."""
    if progress.step >= t.total_steps or progress.stopped_early:
        log.info(f"the training was complete at step {progress.step} (checkpoint): nothing left to train")
        return
    evaluator = evaluator or Evaluator.off()
    global_batch = t.sampler.global_size
    progress.position_at_start = progress.samples
    progress.first_step_at, progress.started_at = None, psutil.Process().create_time()
    first, progress.warm = progress.step, None
    t.ddp_model.train()
    start = time.perf_counter()
    while progress.step < t.total_steps and not progress.stopped_early:
        t.sampler.set_epoch(progress.epoch, start=progress.batch_in_epoch)  # the order is seeded per epoch
        micro_batches = updates(t.phases.batches(t.loader), t.sampler.accumulation)
        for index, batches in enumerate(micro_batches, start=progress.batch_in_epoch):
            loss = train_step(t, batches)
            progress.first_step_at = progress.first_step_at or time.time()
            progress.step += 1
            progress.batch_in_epoch = index + 1
            progress.samples += global_batch
            mark_warm(progress, progress.step - first, evaluator)
            if progress.step % t.log_every == 0 or progress.step == t.total_steps:
                loss = mean_over_ranks(loss)  # every rank sees the same value and stops together
                check_finite(loss, progress.step, checkpoints.rank)
                progress.losses.append([progress.step, float(loss)])
                log_progress(progress, loss, t, global_batch, start, log)
            if progress.step >= t.total_steps or evaluator.due(progress.step) and evaluator.run(t, progress,
                                                                                                 checkpoints):
                break
            if stops and stops.anywhere():
                stop_here(t, progress, checkpoints)
            every = t.checkpoint_every
            if every and progress.step % every == 0 and progress.batch_in_epoch < len(t.sampler):
                checkpoints.save_final(t, progress)  # unless the evaluation just wrote one
        else:
            end_epoch(t, progress, checkpoints, evaluator)
    progress.seconds = time.perf_counter() - start - evaluator.seconds  # training only
    progress.steady_samples_per_second = steady_rate(progress, evaluator)
    evaluator.finish(t, progress, checkpoints)
    checkpoints.save_final(t, progress)


def end_epoch(t: TrainingState, progress: Progress, checkpoints: Checkpointer, evaluator: Evaluator) -> None:
    """An epoch is over: evaluate (evaluation.every epoch), and checkpoint where the next one starts."""
    progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
    if progress.step < t.total_steps:
        evaluated = evaluator.due(progress.step, epoch_end=True)
        if evaluated:
            evaluator.run(t, progress, checkpoints)
        if not (evaluated and evaluator.keep_best):  # else the evaluation just wrote it
            checkpoints.save(t, progress)


def stop_here(t: TrainingState, progress: Progress, checkpoints: Checkpointer) -> None:
    if progress.batch_in_epoch == len(t.sampler):  # the epoch is over: save where the next one starts
        progress.epoch, progress.batch_in_epoch = progress.epoch + 1, 0
    checkpoints.save(t, progress)
    raise Preempted(f"stopped at step {progress.step} on request (SIGTERM); checkpoint written, a retry "
                    "resumes from it")


def final_loss(progress: Progress) -> float:
    """Mean loss (over ranks) of the last few logging points."""
    recent = [loss for _, loss in progress.losses[-5:]] or [float("nan")]
    return sum(recent) / len(recent)
