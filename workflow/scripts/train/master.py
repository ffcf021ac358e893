"""train.precision `bf16_master`: bf16 weights and activations with fp32
master weights, as large-scale bf16 training keeps them.

- The encoder's parameters are bf16, so no op casts a weight per step (bf16
  autocast casts every weight, forward and backward, on every step); its
  gradients are bf16 too, so DDP all-reduces half the bytes.
- The head (every module outside the encoder: the classifier, a pooler
  head, qa_outputs) stays fp32 and takes its input widened to fp32, so the
  logits and the loss are fp32 as under autocast.
- Layer norm and softmax take bf16 inputs and accumulate in fp32 (their CPU
  kernels do), as under autocast.
- The optimizer keeps an fp32 master of every bf16 parameter and AdamW's
  moments in fp32: each step widens the gradients into fp32 buffers, clips
  them there, updates the masters with the fused kernel, and rounds the
  masters back into the bf16 weights (round to nearest).
- Checkpoints hold the masters (exact resume); the saved model is the
  masters, in fp32.
"""

from __future__ import annotations

import torch

BF16 = torch.bfloat16


def to_bf16_encoder(model) -> list[str]:
    """Make the encoder bf16 and keep the head fp32 (its input widened);
    the names of the fp32 head modules."""
    head = [name for name, _ in model.named_children() if name != model.base_model_prefix]
    model.to(BF16)
    for name in head:
        module = getattr(model, name)
        module.float()
        if any(True for _ in module.parameters()):
            module.register_forward_pre_hook(_widen_inputs)
    return head


def step_parts(model, precision: str, lr: float = 1e-5):
    """(optimizer, autocast factory) of a one-group step at `precision`, as a
    rank takes it (for the plan's profile and the bench's): under
    bf16_master the model becomes a bf16 encoder with fp32 masters."""
    from workflow.scripts.common.modeling import autocast_for

    if precision == "bf16_master":
        to_bf16_encoder(model)
        return MasterAdamW([{"params": list(model.parameters())}], lr=lr, fused=True), autocast_for("fp32")
    return torch.optim.AdamW(model.parameters(), lr=lr, fused=True), autocast_for(precision)


def _widen_inputs(module, args):
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


class MasterAdamW(torch.optim.AdamW):
    """AdamW (fused) over fp32 masters of the model's parameters. Its
    param_groups hold the masters, so learning-rate schedulers, state_dict
    and weight-decay groups work as for torch's AdamW; fp32 parameters
    (the head) are their own masters."""

    def __init__(self, groups: list[dict], **kwargs):
        self.model_params: list[torch.Tensor] = []
        master_groups = []
        for group in groups:
            masters = []
            for p in group["params"]:
                master = p if p.dtype == torch.float32 else p.detach().float().requires_grad_()
                masters.append(master)
                self.model_params.append(p)
            master_groups.append({**group, "params": masters})
        super().__init__(master_groups, **kwargs)
        self.masters = [m for g in self.param_groups for m in g["params"]]
        self.lowered = [(p, m) for p, m in zip(self.model_params, self.masters) if p is not m]
        self.staged = False

    def stage_gradients(self) -> list[torch.Tensor]:
        """Widen the bf16 gradients into the masters' fp32 ones (kept from
        step to step, written by one multi-tensor copy); the masters, whose
        gradients clipping then sees."""
        into, widened = [], []
        for p, m in self.lowered:
            if p.grad is None:
                m.grad = None
            elif m.grad is None:
                m.grad = p.grad.float()
            else:
                into.append(m.grad)
                widened.append(p.grad)
        if into:
            torch._foreach_copy_(into, widened)
        self.staged = True
        return self.masters

    @torch.no_grad()
    def step(self, closure=None):
        if not self.staged:  # clipping stages them; without clipping, here
            self.stage_gradients()
        self.staged = False
        loss = super().step(closure)
        if self.lowered:
            torch._foreach_copy_([p for p, _ in self.lowered], [m for _, m in self.lowered])
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.model_params:
            p.grad = None  # the masters' buffers are overwritten by the next stage_gradients

    def state_dict(self) -> dict:
        return {**super().state_dict(), "masters": [m.detach() for _, m in self.lowered]}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        masters = state.pop("masters")
        super().load_state_dict(state)
        with torch.no_grad():
            for (p, m), saved in zip(self.lowered, masters, strict=True):
                m.copy_(saved)
                p.copy_(m)

    @torch.no_grad()
    def fp32_model(self, model):
        """The model in fp32 with the masters' exact values (for save_pretrained)."""
        model.float()
        for (p, m) in self.lowered:
            p.copy_(m)
        return model
