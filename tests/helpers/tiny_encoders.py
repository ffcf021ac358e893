"""Tiny BERT-style models built from a config (no download), padded batches
for them, and one forward and backward's outputs and gradients: what the
tests of the step levers compare a lever's model against."""

from __future__ import annotations

import torch


def tiny(kind: str, attention: str, head: str = "SequenceClassification", layers: int = 3):
    """A `kind` (Bert, Roberta, Electra...) with a `head`, seeded, small:
    3 labels, or start and end logits for QuestionAnswering."""
    import transformers

    config = getattr(transformers, f"{kind}Config")(
        vocab_size=100, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=40, pad_token_id=0, num_labels=2 if head == "QuestionAnswering" else 3,
        attn_implementation=attention)
    torch.manual_seed(0)
    return getattr(transformers, f"{kind}For{head}")(config)


def padded_batch(lengths: list[int], width: int, vocab: int = 100, labels: bool = True, qa: bool = False) -> dict:
    """Rows of `lengths` real tokens padded (right, id 0) to `width`, with
    labels for a 3-class head, or start/end positions for a QA head."""
    torch.manual_seed(1)
    batch = {"input_ids": torch.randint(3, vocab, (len(lengths), width)),
             "attention_mask": torch.zeros(len(lengths), width, dtype=torch.long)}
    for row, length in enumerate(lengths):
        batch["attention_mask"][row, :length] = 1
    batch["input_ids"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, 0)
    if qa:
        ends = torch.tensor([max(length - 1, 0) for length in lengths])
        batch["start_positions"], batch["end_positions"] = ends // 2, ends
    elif labels:
        batch["labels"] = torch.arange(len(lengths)) % 3
    return batch


def outputs_and_grads(model, batch: dict, fields=("logits",)) -> tuple[dict, dict]:
    """The output `fields` and loss of one forward (detached), and every
    parameter's gradient after its backward."""
    model.zero_grad()
    out = model(**batch)
    out.loss.backward()
    values = {name: getattr(out, name).detach().float() for name in (*fields, "loss")}
    return values, {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}


def logits_and_grads(model, batch: dict) -> tuple[torch.Tensor, dict]:
    values, grads = outputs_and_grads(model, batch)
    return values["logits"], grads
