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
- With `one_pass` (train.speed.optimizer) one C kernel per parameter does
  all of that in one pass over memory (train/master_adamw.c): the bf16
  gradient widened and scaled by the clip factor, the update of master and
  moments, the master rounded into the weight; clipping's norm is summed
  from the bf16 gradients. No fp32 gradients are kept. The state (masters,
  moments, steps) is torch's, so checkpoints move between the two paths.
  An embedding table (`row_sparse`) with weight decay 0 is updated only
  in its active rows: those whose gradient or moments ever held a non-zero.
  A batch touches a few hundred of its ~30,000 rows, and a row whose
  gradient and moments are all zero comes out of AdamW unchanged, so the
  result is the full update's, bit for bit, for less of a table's pass.
- Checkpoints hold the masters (exact resume); the saved model is the
  masters, in fp32.
"""

from __future__ import annotations

import math

import torch

from workflow.scripts.train import master_kernel

BF16 = torch.bfloat16


def to_bf16_encoder(model) -> list[str]:
    """Make the encoder bf16 and keep the head fp32 (its input widened);
    the names of the fp32 head modules. Under train.lora (peft's wrapper)
    the adapters turn bf16 with the encoder, and get fp32 masters as they train."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
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
    bf16_master the model becomes a bf16 encoder with fp32 masters; weight
    decay 0, train.weight_decay's default."""
    from workflow.scripts.common.modeling import autocast_for

    if precision == "bf16_master":  # with the one-pass update where its kernel builds, as training takes it
        from workflow.scripts.train import master_kernel

        to_bf16_encoder(model)
        one_pass = master_kernel.load()[0] is not None
        trainable = [p for p in model.parameters() if p.requires_grad]  # train.lora: the adapters and the head
        return (MasterAdamW([{"params": trainable, "weight_decay": 0.0}], lr=lr, fused=True, one_pass=one_pass,
                            row_sparse=embedding_tables(model)), autocast_for("fp32"))
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, fused=True), autocast_for(precision)


def embedding_tables(model) -> list[torch.nn.Parameter]:
    """The trainable weights of the model's embedding modules (word,
    position, token type): a step's gradient is non-zero only in the rows
    its tokens use (MasterAdamW's row_sparse)."""
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.weight.requires_grad]


def _widen_inputs(module, args):
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


class MasterAdamW(torch.optim.AdamW):
    """AdamW (fused) over fp32 masters of the model's parameters. Its
    param_groups hold the masters, so learning-rate schedulers, state_dict
    and weight-decay groups work as for torch's AdamW; fp32 parameters
    (the head) are their own masters. `one_pass`: the step of the C kernel
    (train/master_kernel.py), which must have loaded; clipping then goes
    through clip_grad_norm."""

    def __init__(self, groups: list[dict], one_pass: bool = False, row_sparse=(), row_hint=None, **kwargs):
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
        self.one_pass = one_pass
        self.clip_scale = 1.0  # the next step's gradient factor (not `grad_scale`: torch's Adam reads that)
        if one_pass:
            self.kernel, why = master_kernel.load()
            if self.kernel is None:
                raise RuntimeError(f"MasterAdamW one_pass: {why}")
            if any(g["amsgrad"] or g["maximize"] for g in self.param_groups):
                raise ValueError("MasterAdamW one_pass: no amsgrad, no maximize")
            pairs = iter(zip(self.model_params, self.masters))
            self.group_pairs = [[next(pairs) for _ in g["params"]] for g in self.param_groups]
        sparse = {id(p) for p in row_sparse}
        self.row_sparse = {id(p) for p in self.model_params if id(p) in sparse and p.dim() == 2}
        self.active: dict[int, torch.Tensor] = {}  # id of a row_sparse parameter: its active rows (uint8)
        self.rows_updated = [0, 0]  # rows of the row_sparse tables updated, and their rows, over the steps
        # The rows a row_sparse table's gradient can be non-zero in, where something already knows them
        # (the word embedding's all-reduce: embedding_grad.GradPool.rows_of), else None: then they are read.
        self.row_hint = row_hint or (lambda grad: None)

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
    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """one_pass's gradient clipping: the total 2-norm of the model's
        gradients (summed in double from the bf16 ones by the kernel), and
        torch's clip factor min(1, max_norm / (norm + 1e-6)) kept for the
        next step, which scales the gradients as it widens them."""
        assert self.one_pass, "the three-pass path clips the masters' gradients (stage_gradients)"
        low = [p.grad for p, _ in self.lowered if p.grad is not None]
        full = [p.grad for p in self.model_params if p.dtype == torch.float32 and p.grad is not None]
        squares = self.kernel.sum_squares_bf16(low, [self.nonzero_rows(g) for g in low]) \
            + math.fsum(float(g.double().square().sum()) for g in full)
        norm = torch.tensor(math.sqrt(squares), dtype=torch.float32)
        self.clip_scale = float(torch.clamp(max_norm / (norm + 1e-6), max=1.0))  # as clip_grads_with_norm_
        return norm

    def nonzero_rows(self, grad: torch.Tensor) -> torch.Tensor | None:
        """A flag per row of `grad`, 0 where it is all zeros, where row_hint knows its rows; else None."""
        rows = self.row_hint(grad)
        return None if rows is None else torch.zeros(grad.shape[0], dtype=torch.uint8).index_fill_(0, rows, 1)

    @torch.no_grad()
    def step(self, closure=None):
        if self.one_pass:
            return self._one_pass_step(closure)
        if not self.staged:  # clipping stages them; without clipping, here
            self.stage_gradients()
        self.staged = False
        loss = super().step(closure)
        if self.lowered:
            torch._foreach_copy_([p for p, _ in self.lowered], [m for _, m in self.lowered])
        return loss

    def _one_pass_step(self, closure=None):
        """torch's AdamW step (state made and stepped as for fused=True) by
        the kernel, every parameter's calls run together."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        calls = []
        for group, pairs in zip(self.param_groups, self.group_pairs):
            beta1, beta2 = group["betas"]
            for p, m in pairs:
                if p.grad is None:
                    continue
                state = self.state[m]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(m, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(m, memory_format=torch.preserve_format)
                state["step"] += 1
                args = master_kernel.adamw_args(float(group["lr"]), float(beta1), float(beta2), group["weight_decay"],
                                                group["eps"], state["step"].item(), self.clip_scale)
                active = self.active_rows(p, m, state, group)
                if active is None:
                    calls += self.kernel.adamw(None if p is m else p, p.grad.contiguous(), m, state["exp_avg"],
                                               state["exp_avg_sq"], args)
                else:
                    calls += self.kernel.adamw_rows(p, p.grad, m, state["exp_avg"], state["exp_avg_sq"], active,
                                                    args)
        self.kernel.run(calls)
        self.clip_scale = 1.0
        return loss

    def active_rows(self, p: torch.Tensor, m: torch.Tensor, state: dict, group: dict) -> torch.Tensor | None:
        """The rows of a row_sparse bf16 table the step must update (uint8
        flags), or None for a full update. Skipping a row is exact only where
        its gradient, exp_avg and exp_avg_sq are all zero and weight decay is
        0: the flags start from the moments' non-zero rows (a fresh state's
        are all zero; a loaded one's say which rows have moved) and take in
        every row this step's gradient holds a non-zero in."""
        if (id(p) not in self.row_sparse or p is m or group["weight_decay"] != 0 or not p.grad.is_contiguous()
                or not math.isfinite(self.clip_scale)):  # a non-finite clip factor turns the zero rows NaN too
            return None
        active = self.active.get(id(p))
        if active is None:
            active = (state["exp_avg"].ne(0) | state["exp_avg_sq"].ne(0)).any(dim=1).to(torch.uint8)
            self.active[id(p)] = active
        rows = self.row_hint(p.grad)
        if rows is None:
            self.kernel.run(self.kernel.mark_rows(p.grad, active))
        else:  # a known row whose gradient is zero comes out of the update unchanged: marking it is exact
            active.index_fill_(0, rows, 1)
        self.rows_updated[0] += int(active.sum())
        self.rows_updated[1] += active.numel()
        return active

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.model_params:
            p.grad = None  # the masters' buffers are overwritten by the next stage_gradients

    def state_dict(self) -> dict:
        return {**super().state_dict(), "masters": [m.detach() for _, m in self.lowered]}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        masters = state.pop("masters")
        super().load_state_dict(state)
        self.active = {}  # the loaded moments say which rows are active
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
