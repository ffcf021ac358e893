"""The grad_buckets lever (train.speed.grad_buckets `direct`, cpuddp's
encoder under DDP): the linear layers' weight and bias gradients, and the
word embedding's reused table (embedding_grad reuse), computed straight
into their views in DDP's buckets.

torch's backward makes each gradient a new tensor, and DDP's reducer then
copies it into the parameter's view in its bucket (gradient_as_bucket_view
keeps that view as .grad only until zero_grad(set_to_none) drops it): for
MiniLM 45 MB read and written every update, 5.7 ms a copy on an AMD EPYC
(Zen 4) core. A gradient that already is the view is not copied. Here the
backward runs the same matmul and the same sum as torch's, into the view:
the gradients are torch's bit for bit.

A view is written only where the parameter holds no gradient yet in this
update (with accumulation the later micro-batches' gradients are added by
autograd, as without the lever) and the optimizer has read the last
update's; a view that DDP has since moved (it rebuilds its buckets after
the first update) is still correct: DDP copies from it, as from any other
tensor."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class BucketViews:
    """Each parameter's gradient view in DDP's buckets, as the comm hook last saw them."""

    def __init__(self):
        self.views: dict[int, torch.Tensor] = {}

    def learn(self, bucket) -> None:
        """The views of `bucket`'s parameters (the comm hook sees every bucket each update)."""
        for parameter, view in zip(bucket.parameters(), bucket.gradients()):
            self.views[id(parameter)] = view

    def free(self, parameter: torch.Tensor) -> torch.Tensor | None:
        """`parameter`'s bucket view where its gradient may be written
        there, as a new view (autograd takes a gradient that nothing else
        references as .grad instead of copying it); else None."""
        view = self.views.get(id(parameter)) if parameter.grad is None else None
        return None if view is None else view.view(view.shape)


def linear(module: torch.nn.Module, x: torch.Tensor, views: BucketViews | None) -> torch.Tensor:
    """module(x), with its gradients into their bucket views where `views`
    is given and the module is a plain nn.Linear computing in its own
    dtype (autocast casts inside F.linear, and LoRA wraps the layer)."""
    if views is None or type(module) is not torch.nn.Linear or torch.is_autocast_enabled("cpu") \
            or x.dim() != 2 or module.bias is None:
        return module(x)
    return _BucketLinear.apply(x, module.weight, module.bias, views)


# Per (rows, inputs, outputs, threads): whether oneDNN's linear with the bias in the kernel gives F.linear's bits.
_BIAS_IN_KERNEL: dict[tuple[int, int, int, int], bool] = {}


def forward_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """F.linear(x, weight, bias), in bf16 by oneDNN's linear with the bias
    added in the kernel where that gives F.linear's bits on this CPU.

    In bf16 F.linear is an addmm, which torch runs as a copy of the bias
    into every output row and a oneDNN matmul adding into it: at MiniLM's
    shapes and MRPC's 864 rows 0.1-0.25 ms a call of 1.2-5 ms, about 4 ms
    of a 325 ms step (bench/results/2026-12-07-epyc-zen4-bias-in-kernel.txt).
    torch.ops.mkldnn._linear_pointwise is that linear without the copy (what
    torch.compile's CPU fusions call). The first call of each shape runs
    both and keeps the fused one only where they agree bit for bit, so a
    oneDNN or torch that sums in another order, or lacks the op, costs one
    extra matmul per shape and changes nothing."""
    key = (x.shape[0], x.shape[1], weight.shape[0], torch.get_num_threads())
    if x.dtype != torch.bfloat16 or weight.dtype != x.dtype or bias.dtype != x.dtype \
            or _BIAS_IN_KERNEL.get(key) is False:
        return F.linear(x, weight, bias)
    fused = _bias_in_kernel(x, weight, bias)
    if key not in _BIAS_IN_KERNEL:
        reference = F.linear(x, weight, bias)
        _BIAS_IN_KERNEL[key] = fused is not None and torch.equal(fused.view(torch.int16), reference.view(torch.int16))
        return reference
    return fused


def _bias_in_kernel(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor | None:
    """oneDNN's linear of contiguous x, or None where this torch has no such op."""
    try:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")
    except (AttributeError, RuntimeError):
        return None


class _BucketLinear(torch.autograd.Function):
    """F.linear (addmm) whose backward is AddmmBackward0's: grad_x = grad @ W,
    grad_W = grad^T @ x (torch's choice for a weight used transposed) and
    grad_b = grad summed over rows, the last two into the bucket views."""

    @staticmethod
    def forward(ctx, x, weight, bias, views: BucketViews):
        ctx.save_for_backward(x, weight)
        ctx.parameters = (weight, bias)
        ctx.views = views
        return forward_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        needs_x, needs_weight, needs_bias, _ = ctx.needs_input_grad
        grad_x = grad.mm(weight) if needs_x else None
        grad_weight = grad_bias = None
        if needs_weight:
            into = ctx.views.free(ctx.parameters[0])
            grad_weight = grad.t().mm(x) if into is None else torch.mm(grad.t(), x, out=into)
        if needs_bias:
            into = ctx.views.free(ctx.parameters[1])
            grad_bias = grad.sum(0) if into is None else torch.sum(grad, 0, out=into)
        return grad_x, grad_weight, grad_bias, None
