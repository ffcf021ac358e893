"""The heads cpuddp trains, on the encoder's packed output, with
transformers' losses and output objects (`.loss`, `.logits`, or
`.start_logits` and `.end_logits`).

Sequence classification reads each sequence's first token ([CLS], <s>):
BERT through its pooler (dense, tanh), RoBERTa, XLM-R and CamemBERT
through dropout, dense, tanh, ELECTRA the same with GELU, DistilBERT
through pre_classifier and ReLU; then dropout and the output layer. The
loss follows problem_type as transformers' heads decide it.

Extractive QA: start and end logits per real token, in packed order
([tokens]) for packed input; for a padded batch laid out [batch, width] as
transformers gives them, the lowest float at padding. The loss is the mean
of the start and end cross-entropies, each a softmax over one sequence's
real tokens (segment_cross_entropy): transformers computes logits for
padding tokens and its loss includes them; here no padding is computed, so
none is in the softmax."""

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
        """tokens: every packed token's hidden state [tokens, hidden]. Positions
        in the input's order; logits [tokens] in packed order for packed
        input, [batch, width] with the lowest float at padding for a padded one."""
        from transformers.modeling_outputs import QuestionAnsweringModelOutput

        logits = self.out(dropout(tokens, self.p, self.training, self.kernel))
        start, end = logits[:, 0].contiguous(), logits[:, 1].contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = (segment_cross_entropy(start, packed, start_positions)
                    + segment_cross_entropy(end, packed, end_positions)) / 2
        if packed.index is not None:  # a padded batch: its logits laid out as transformers lays them out
            lowest = torch.finfo(logits.dtype).min
            start, end = packed.padded(start, lowest), packed.padded(end, lowest)
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start, end_logits=end)


def segment_cross_entropy(logits: torch.Tensor, packed: Packed, positions: torch.Tensor) -> torch.Tensor:
    """The mean over sequences of the cross-entropy of each sequence's own
    packed logits [tokens] against its answer position, in fp32: a softmax
    per segment, no padded layout. Positions come in the input's order;
    negative ones count as 0 and ones outside their sequence are ignored,
    as transformers clamps and ignores those outside the padded width (a
    position inside the padding has nothing to point at). All ignored: nan,
    as F.cross_entropy gives."""
    if positions.dim() > 1:
        positions = positions.squeeze(-1)
    if packed.order is not None:
        positions = positions.index_select(0, packed.order)
    lengths = torch.tensor(packed.lengths)
    positions = positions.clamp(min=0)
    kept = positions < lengths
    segment = torch.repeat_interleave(torch.arange(packed.batch), lengths)
    values = logits.float()
    peak = values.detach().new_full((packed.batch,), float("-inf")).scatter_reduce(0, segment, values.detach(), "amax")
    sums = values.new_zeros(packed.batch).index_add(0, segment, (values - peak[segment]).exp())
    answer = values[packed.first_rows() + torch.minimum(positions, lengths - 1)]
    return (sums.log() + peak - answer)[kept].mean()
