"""A tiny BERT that has learned a task (for the INT8 accuracy gates, which
an untrained model cannot meet): a few seconds of in-process training, so it
is built by integration fixtures only; the unit lane trains nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def learnable_split(rng, n: int):
    """Label 0: tokens drawn from one id range, label 1: from another."""
    rows = {"input_ids": [], "token_type_ids": [], "attention_mask": [], "labels": []}
    for _ in range(n):
        label = int(rng.integers(2))
        low = 2000 if label == 0 else 3000
        ids = [101] + rng.integers(low, low + 500, int(rng.integers(6, 20))).tolist() + [102]
        rows["input_ids"].append(ids)
        rows["token_type_ids"].append([0] * len(ids))
        rows["attention_mask"].append([1] * len(ids))
        rows["labels"].append(label)
    return rows


def train_learned(out: Path, tiny_model_dir: Path) -> Path:
    """A tiny BERT trained in-process to near-perfect accuracy, and its data, in `out`."""
    import datasets
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from workflow.scripts.data.batching import pad_collate

    rng = np.random.default_rng(0)
    data = datasets.DatasetDict({"train": datasets.Dataset.from_dict(learnable_split(rng, 512)),
                                 "validation": datasets.Dataset.from_dict(learnable_split(rng, 200))})
    data.save_to_disk(str(out / "tokenized"))
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    collate, train = pad_collate(0), data["train"]
    model.train()
    for _epoch in range(3):
        for start in range(0, len(train), 32):
            batch = collate([train[i] for i in range(start, min(start + 32, len(train)))])
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    model.save_pretrained(out / "model")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out / "model")
    return out
