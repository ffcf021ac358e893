"""One rank of the transformers Trainer, as run_glue.py drives it (for make bench).

Started under mpirun like cpuddp's ranks; the Trainer (through accelerate)
reads PMI_RANK/PMI_SIZE and joins a gloo group itself. run_glue's default
pads every sequence to max_seq_length; --pad batch pads per batch. The
Trainer at its best, as a careful user sets it: --pad batch --bf16 (where
the CPU has native bf16) --group-by-length, its default fused AdamW;
--compile adds torch_compile=True.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import datasets
import torch
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                          TrainingArguments)


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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    data = datasets.load_from_disk(args.data)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    collator = DataCollatorWithPadding(tokenizer, padding=args.pad if args.pad == "max_length" else True,
                                       max_length=args.max_length)
    training = TrainingArguments(
        output_dir=str(Path(args.out) / "trainer"), per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64, learning_rate=args.lr, num_train_epochs=args.epochs,
        max_steps=args.steps or -1, save_strategy="no", report_to=[], logging_steps=10, seed=args.seed,
        use_cpu=True, ddp_backend=None if args.one_process else "gloo", dataloader_num_workers=0, disable_tqdm=True,
        bf16=args.bf16,
        train_sampling_strategy="group_by_length" if args.group_by_length else "random",
        torch_compile=args.compile, optim="adamw_torch_fused")
    trainer = Trainer(model=model, args=training, train_dataset=data["train"], eval_dataset=data["validation"],
                      data_collator=collator)
    start = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - start
    rank = trainer.args.process_index  # whichever MPI started us (PMI_RANK, OMPI_COMM_WORLD_RANK, ...)
    record = {"rank": rank, "train_samples_per_second": result.metrics["train_samples_per_second"],
              "train_seconds": seconds, "steps": result.global_step,
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if args.steps is None:
        predictions = trainer.predict(data["validation"])
        record["accuracy"] = float((predictions.predictions.argmax(-1) == predictions.label_ids).mean())
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
