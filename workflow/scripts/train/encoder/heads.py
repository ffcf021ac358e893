"""The heads cpuddp trains, on the encoder's packed output, with
transformers' losses and output objects (`.loss`, `.logits`, or
`.start_logits` and `.end_logits`).

Sequence classification reads each sequence's first token ([CLS], <s>):
BERT through its pooler (dense, tanh), RoBERTa, XLM-R and CamemBERT
through dropout, dense, tanh, ELECTRA the same with GELU, DistilBERT
through pre_classifier and ReLU; then dropout and the output layer. The
loss follows problem_type as transformers' heads decide it.

Extractive QA: start and end logits per real token, laid out [batch,
width] as transformers gives them. Padded positions hold the lowest float
(transformers computes logits for padding tokens and its loss includes
them; here no padding is computed, so they are left out of the softmax):
the loss is the mean of the start and end cross-entropies over real
positions, positions clamped to the width and ignored there, as
transformers does."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workflow.scripts.train.encoder.layers import dropout
from workflow.scripts.train.encoder.packing import Packed
from workflow.scripts.train.encoder.spec import Spec

ACTIVATION = {"bert": torch.tanh, "roberta": torch.tanh, "electra": F.gelu, "distilbert": F.relu}


class ClassificationHead(nn.Module):
    def __init__(self, spec: Spec):
        super().__init__()
        self.dense = nn.Linear(spec.hidden, spec.hidden)
        self.out = nn.Linear(spec.hidden, spec.num_labels)
        self.dropout_first = spec.kind in ("roberta", "electra")
        self.activation = ACTIVATION[spec.kind]
        self.p, self.num_labels, self.problem_type = spec.head_dropout, spec.num_labels, spec.problem_type
        self.kernel = None

    def forward(self, first: torch.Tensor, packed: Packed, labels: torch.Tensor | None = None):
        """first: each sequence's first token [sequences, hidden], packed order."""
        from transformers.modeling_outputs import SequenceClassifierOutput

        x = packed.restore(first)
        if self.dropout_first:
            x = dropout(x, self.p, self.training, self.kernel)
        x = dropout(self.activation(self.dense(x)), self.p, self.training, self.kernel)
        logits = self.out(x)
        loss = None if labels is None else self.loss(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """transformers' sequence-classification loss, problem_type decided as it decides it."""
        if self.problem_type is None:
            if self.num_labels == 1:
                self.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                self.problem_type = "single_label_classification"
            else:
                self.problem_type = "multi_label_classification"
        if self.problem_type == "regression":
            if self.num_labels == 1:
                return F.mse_loss(logits.squeeze(), labels.squeeze())
            return F.mse_loss(logits, labels)
        if self.problem_type == "single_label_classification":
            return F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return F.binary_cross_entropy_with_logits(logits, labels)


class QuestionAnsweringHead(nn.Module):
    def __init__(self, spec: Spec):
        super().__init__()
        self.out = nn.Linear(spec.hidden, 2)
        self.p = spec.head_dropout if spec.kind == "distilbert" else 0.0  # DistilBERT's qa_dropout
        self.kernel = None

    def forward(self, tokens: torch.Tensor, packed: Packed, start_positions=None, end_positions=None):
        """tokens: every packed token's hidden state [tokens, hidden]."""
        from transformers.modeling_outputs import QuestionAnsweringModelOutput

        logits = self.out(dropout(tokens, self.p, self.training, self.kernel))
        lowest = torch.finfo(logits.dtype).min
        start, end = (packed.padded(logits[:, i].contiguous(), lowest) for i in (0, 1))
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = qa_loss(start, end, start_positions, end_positions)
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start, end_logits=end)


def qa_loss(start: torch.Tensor, end: torch.Tensor, start_positions, end_positions) -> torch.Tensor:
    """transformers' QA loss: positions outside the inputs clamped to the width and ignored."""
    if start_positions.dim() > 1:
        start_positions = start_positions.squeeze(-1)
    if end_positions.dim() > 1:
        end_positions = end_positions.squeeze(-1)
    ignored = start.size(1)
    start_loss = F.cross_entropy(start, start_positions.clamp(0, ignored), ignore_index=ignored)
    end_loss = F.cross_entropy(end, end_positions.clamp(0, ignored), ignore_index=ignored)
    return (start_loss + end_loss) / 2
