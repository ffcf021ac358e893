"""One rank of the transformers Trainer, as run_glue.py drives it (for make bench).

Started under mpirun like cpuddp's ranks; the Trainer (through accelerate)
reads PMI_RANK/PMI_SIZE and joins a gloo group itself. run_glue's default
pads every sequence to max_seq_length; --pad batch pads per batch. The
Trainer at its best, as a careful user sets it: --pad batch --bf16 (where
the CPU has native bf16) --group-by-length, its default fused AdamW;
--compile adds torch_compile=True. --task stsb trains a one-output
regression head (float labels) and scores Pearson and Spearman on dev;
glibc's malloc keeps what it frees (train/allocator.py, the allocator
lever cpuddp's ranks take): the Trainer as fast as the allocator lets it
be, so cpuddp's lead is never the allocator's (--system-allocator: glibc's
defaults);
mrpc scores F1 (positive class) and accuracy. --evaluate scores dev even
with --steps; --profile-steps N times N whole steps (data, collation,
forward, backward, optimizer and the Trainer's own work between them)
after 3 warm-up steps, then profiles N more with torch.profiler, into
rank0.json's `profile` (bench/step_profile.py --trainer); rank0.json
holds the logged losses (`loss_history`, [step, loss] every --log-every steps, the mean over ranks of that window,
divided by the factor this Trainer scales the loss by, `logged_loss_scale`).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import datasets
import numpy as np
import torch
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                          TrainerCallback, TrainingArguments)

from workflow.scripts.train import allocator

WARMUP_STEPS = 3


class WholeStepProfile(TrainerCallback):
    """Whole steps, from one step's start to the next's: N timed with the
    profiler off, then N profiled (ops' self CPU time and matmul FLOPs)."""

    def __init__(self, steps: int):
        self.steps, self.started, self.profiler = steps, None, None
        self.every = []  # every step's seconds, warm-up and profiled ones included
        self.batches = []  # (padded tokens, real tokens) of every batch, in the order collated

    def collating(self, collator):
        """The collator, noting each batch's padded and real tokens (batch k is step k's)."""
        def collate(rows):
            batch = collator(rows)
            self.batches.append((batch["input_ids"].numel(), int(batch["attention_mask"].sum())))
            return batch
        return collate

    def on_step_begin(self, args, state, control, **kwargs):
        now = time.perf_counter()
        done = state.global_step - WARMUP_STEPS  # steps finished since the warm-up
        if self.started is not None:
            self.every.append(now - self.started)
        if done == self.steps:
            from torch.profiler import ProfilerActivity, profile

            self.profiler = profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True)
            self.profiler.__enter__()
        elif done == 2 * self.steps and self.profiler is not None:
            self.profiler.__exit__(None, None, None)
        self.started = now

    def summary(self) -> dict:
        from bench.step_profile import op_shares

        if len(self.every) < WARMUP_STEPS + 2 * self.steps:
            raise SystemExit(f"--profile-steps {self.steps} needs --steps {WARMUP_STEPS + 2 * self.steps + 1} or more")

        timed, profiled = (slice(WARMUP_STEPS + k * self.steps, WARMUP_STEPS + (k + 1) * self.steps) for k in (0, 1))
        timed_tokens, profiled_tokens = self.batches[timed], self.batches[profiled]
        return {"whole_step_seconds": self.every[timed], "every_step_seconds": self.every,
                **op_shares(self.profiler, self.steps), "timed_tokens": [list(t) for t in timed_tokens],
                "profiled_tokens": [list(t) for t in profiled_tokens]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="tokenized DatasetDict (cpuddp's)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--pad", choices=["max_length", "batch"], default="max_length")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--group-by-length", action="store_true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--one-process", action="store_true", help="no mpirun, no process group (1 rank)")
    parser.add_argument("--task", choices=["mrpc", "stsb"], default="mrpc")
    parser.add_argument("--log-every", type=int, default=10, help="steps between logged losses")
    parser.add_argument("--evaluate", action="store_true", help="score dev even with --steps")
    parser.add_argument("--profile-steps", type=int, default=0, help="time and profile this many whole steps")
    parser.add_argument("--system-allocator", action="store_true", help="glibc's malloc defaults")
    args = parser.parse_args()
    if not args.system_allocator:
        allocator.keep_freed()
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    data = datasets.load_from_disk(args.data)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=1 if args.task == "stsb" else 2,
        problem_type="regression" if args.task == "stsb" else "single_label_classification")
    collator = DataCollatorWithPadding(tokenizer, padding=args.pad if args.pad == "max_length" else True,
                                       max_length=args.max_length)
    training = TrainingArguments(
        output_dir=str(Path(args.out) / "trainer"), per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64, learning_rate=args.lr, num_train_epochs=args.epochs,
        max_steps=args.steps or -1, save_strategy="no", report_to=[], logging_steps=args.log_every, seed=args.seed,
        use_cpu=True, ddp_backend=None if args.one_process else "gloo", dataloader_num_workers=0, disable_tqdm=True,
        bf16=args.bf16,
        train_sampling_strategy="group_by_length" if args.group_by_length else "random",
        torch_compile=args.compile, optim="adamw_torch_fused",
        # At its best: the plain mean loss. With this on (the default) and a
        # forward that takes **kwargs, the Trainer multiplies the mean
        # classification loss by the number of processes (meant for losses
        # summed over num_items_in_batch), so its gradients reach clipping
        # ranks x too large.
        average_tokens_across_devices=False)
    profiled = WholeStepProfile(args.profile_steps) if args.profile_steps else None
    collator = profiled.collating(collator) if profiled else collator
    trainer = Trainer(model=model, args=training, train_dataset=data["train"], eval_dataset=data["validation"],
                      data_collator=collator, callbacks=[profiled] if profiled else None)
    start = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - start
    # (Kept for runs that turn it back on: the logged history is divided back.)
    scale = trainer.accelerator.num_processes if (
        training.average_tokens_across_devices and trainer.model_accepts_loss_kwargs) else 1
    rank = trainer.args.process_index  # whichever MPI started us (PMI_RANK, OMPI_COMM_WORLD_RANK, ...)
    record = {"rank": rank, "train_samples_per_second": result.metrics["train_samples_per_second"],
              "train_seconds": seconds, "steps": result.global_step,
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
              "logged_loss_scale": scale,
              "loss_history": [[e["step"], e["loss"] / scale] for e in trainer.state.log_history if "loss" in e]}
    if profiled:
        record["profile"] = profiled.summary()
    if args.steps is None or args.evaluate:
        record.update(dev_scores(args.task, trainer.predict(data["validation"])))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"rank{rank}.json").write_text(json.dumps(record))


def dev_scores(task: str, predictions) -> dict:
    """mrpc: accuracy and F1 of the positive class; stsb: Pearson and Spearman."""
    from bench.accuracy_judge import scores  # the repository is on PYTHONPATH (prepare_job_environment)

    logits, labels = np.asarray(predictions.predictions, dtype=np.float64), predictions.label_ids
    return scores(task, logits.reshape(-1) if task == "stsb" else logits.argmax(-1), labels)


if __name__ == "__main__":
    main()
