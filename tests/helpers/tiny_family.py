"""Tiny random-initialised transformers models of each architecture the
packed encoder serves (workflow/scripts/train/encoder/), built from
configs (no download), and one forward and backward's numbers to compare."""

from __future__ import annotations

import torch

KINDS = ("Bert", "Roberta", "XLMRoberta", "Camembert", "Electra", "DistilBert")
HEADS = {"classification": "SequenceClassification", "qa": "QuestionAnswering"}


def config(kind: str, task: str, num_labels: int = 3, problem_type: str | None = None, **extra):
    import transformers

    labels = 2 if task == "qa" else num_labels
    positions = extra.pop("max_position_embeddings", 40)
    if kind == "DistilBert":
        return transformers.DistilBertConfig(vocab_size=100, dim=32, n_layers=3, n_heads=4, hidden_dim=64,
                                             max_position_embeddings=positions, pad_token_id=1, num_labels=labels,
                                             problem_type=problem_type, attn_implementation="eager", **extra)
    sizes = {"embedding_size": 16} if kind == "Electra" else {}  # ELECTRA's projection of narrower embeddings
    return getattr(transformers, f"{kind}Config")(
        vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=positions, pad_token_id=1, num_labels=labels, problem_type=problem_type,
        type_vocab_size=2, attn_implementation="eager", **sizes, **extra)


def tiny_hf(kind: str, task: str, **kwargs):
    """A seeded `kind` model with the task's head, in eval mode (no dropout)."""
    import transformers

    torch.manual_seed(0)
    model = getattr(transformers, f"{kind}For{HEADS[task]}")(config(kind, task, **kwargs))
    with torch.no_grad():  # non-zero biases and norms, so that every mapping matters
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model.eval()


def batch(lengths: list[int], width: int, task: str, labels: str = "single", pad_id: int = 1) -> dict:
    """Right-padded rows of `lengths` tokens with token types, and the task's targets."""
    generator = torch.Generator().manual_seed(1)
    rows = len(lengths)
    mask = (torch.arange(width) < torch.tensor(lengths).unsqueeze(1)).long()
    out = {"input_ids": torch.randint(3, 100, (rows, width), generator=generator).masked_fill(mask == 0, pad_id),
           "attention_mask": mask,
           "token_type_ids": ((torch.arange(width) >= torch.tensor(lengths).unsqueeze(1) // 2) & (mask == 1)).long()}
    if task == "qa":
        ends = torch.tensor([length - 1 for length in lengths])
        out["start_positions"], out["end_positions"] = ends // 2, ends
        out["end_positions"][0] = width + 5  # outside the inputs: clamped and ignored
    elif labels == "single":
        out["labels"] = torch.arange(rows) % 3
    elif labels == "regression":
        out["labels"] = torch.rand(rows, generator=generator) * 5
    else:
        out["labels"] = (torch.rand(rows, 3, generator=generator) > 0.5).float()
    return out


def masked_qa_loss(inputs: dict):
    """transformers' QA loss on its logits, padding left out of the softmax as
    ours leaves it (transformers computes logits for padding tokens and its
    loss includes them)."""
    import torch.nn.functional as F

    padding = inputs["attention_mask"] == 0
    width = padding.shape[1]

    def cross_entropy(logits, positions):
        logits = logits.masked_fill(padding, torch.finfo(logits.dtype).min)
        return F.cross_entropy(logits, positions.clamp(0, width), ignore_index=width)

    def loss(out):
        return (cross_entropy(out.start_logits, inputs["start_positions"])
                + cross_entropy(out.end_logits, inputs["end_positions"])) / 2
    return loss


def run(model, inputs: dict, task: str, loss_of=None) -> tuple[dict, dict]:
    """Outputs (real positions only for QA) and loss of one forward, and the
    gradients of its backward; loss_of(outputs) replaces the model's loss."""
    model.zero_grad()
    out = model(**inputs)
    loss = out.loss if loss_of is None else loss_of(out)
    loss.backward()
    real = inputs["attention_mask"].bool()
    if task == "qa":
        values = {"start": out.start_logits.detach()[real], "end": out.end_logits.detach()[real]}
    else:
        values = {"logits": out.logits.detach()}
    values["loss"] = loss.detach()
    return values, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
