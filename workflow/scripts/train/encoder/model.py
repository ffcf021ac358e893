"""cpuddp's own model of the BERT family: the packed encoder and a head,
called with the batch as the training loop gives it."""

from __future__ import annotations

import torch
from torch import nn

from workflow.scripts.train.encoder import packing
from workflow.scripts.train.encoder.heads import ClassificationHead, QuestionAnsweringHead
from workflow.scripts.train.encoder.layers import Encoder
from workflow.scripts.train.encoder.spec import Spec


class PackedModel(nn.Module):
    """Children: `encoder` (base_model_prefix, bf16 under bf16_master) and `head`
    (fp32 there: train/master.to_bf16_encoder widens its input)."""

    base_model_prefix = "encoder"

    def __init__(self, spec: Spec, config):
        super().__init__()
        self.spec, self.config = spec, config
        self.encoder = Encoder(spec)
        self.head = ClassificationHead(spec) if spec.task == "classification" else QuestionAnsweringHead(spec)
        self.choices: dict[str, str] = {}
        """What the build picked and why (dropout kernel, ...), for the run's log."""

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.word

    def use_dropout_kernel(self, kernel) -> None:
        """Every dropout of the model from the hash kernel (None: torch's dropout)."""
        self.encoder.kernel = self.head.kernel = kernel

    def use_grad_pool(self, pool) -> None:
        """The word embedding's gradient into `pool`'s reused table (train/embedding_grad.py)."""
        self.encoder.grad_pool = pool

    def use_bucket_views(self, views) -> None:
        """The linear layers' gradients into DDP's bucket views (train/bucket_grads.py; None: torch's backward)."""
        self.encoder.bucket_views = views

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                start_positions: torch.Tensor | None = None, end_positions: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cu_seqlens=None):
        """A right-padded batch [batch, width] with its attention_mask, or one
        already packed: input_ids (and token_type_ids, position_ids) [tokens]
        with cu_seqlens offsets [sequences + 1]."""
        if cu_seqlens is not None:
            packed = packing.from_offsets(cu_seqlens)
        else:
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            packed = packing.pack(mask)
        ids = packing.take(packed, input_ids)
        if position_ids is None:
            positions = packing.positions(packed, input_ids, self.spec.pad_id, self.spec.roberta_positions)
        else:
            positions = packing.take(packed, position_ids)
        types = packing.take(packed, token_type_ids) if self.spec.token_types else None
        hidden = self.encoder(ids, positions, types, packed)
        if self.spec.task == "classification":
            return self.head(hidden, packed, labels)
        return self.head(hidden, packed, start_positions, end_positions)

    def save_pretrained(self, folder, **kwargs) -> None:
        """A folder that transformers' AutoModelFor*.from_pretrained loads unchanged (fp32)."""
        from workflow.scripts.train.encoder.weights import write_folder

        write_folder(self, folder)
