"""precision: auto, decided once for the whole cluster from every node's
measurement. Each node times an fp32 and a bf16 matmul (nodes/describe.py);
the decision takes the slowest node's bf16 speed-up and asks for a margin,
so that timing noise on a CPU where the two are close never splits the
cluster (nodes whose measurements differ within the margin agree).
"""

from __future__ import annotations

# bf16 only if its matmul is at least this much faster than fp32 on every
# node: a 0.3 s timing varies by several percent between runs (more on a
# shared machine), and bf16 autocast also costs casts the matmul omits.
MARGIN = 0.10
BF16_KINDS = ("bf16", "bf16_master")
AUTO_BF16 = "bf16_master"  # what auto picks where bf16 pays (train/master.py, docs/levers.md)


def speedup(matmul: dict | None) -> float | None:
    """bf16 over fp32 matmul speed; None where nothing was measured."""
    if not matmul or not matmul.get("fp32_gflops"):
        return None
    return matmul["bf16_gflops"] / matmul["fp32_gflops"]


def decide(requested: str, nodes: list[tuple[str, dict]]) -> tuple[str, str]:
    """(precision, why) for every node; `nodes` are (name, report) with the
    report's `native_bf16_flags` and `matmul` (describe.py)."""
    if requested != "auto":
        return requested, "requested"
    lacking = [name for name, r in nodes if not r.get("native_bf16_flags") or speedup(r.get("matmul")) is None]
    if lacking:
        return "fp32", f"auto: no native bf16 on {', '.join(lacking)}, so fp32 everywhere"
    ratio, name = min((speedup(r["matmul"]), name) for name, r in nodes)
    where = "here" if len(nodes) == 1 else f"on the slowest node, {name}"
    if ratio >= 1 + MARGIN:
        return AUTO_BF16, f"auto: bf16 matmul measured {ratio:.2f}x fp32 {where} (bf16 needs {1 + MARGIN:.2f}x)"
    return "fp32", (f"auto: bf16 matmul measured only {ratio:.2f}x fp32 {where}; bf16 needs "
                    f"{1 + MARGIN:.2f}x on every node, so fp32")


def beside_ipex(precision: str, why: str, ipex: bool, requested: str, ipex_requested) -> tuple[str, str, bool, str]:
    """(precision, why, ipex, ipex's why): IPEX optimizes the model and its
    optimizer for autocast's fp32 weights, so it does not run beside
    bf16_master's bf16 weights and fp32 masters. With IPEX in use, auto
    takes bf16; bf16_master asked for by name turns IPEX off, or is refused
    where IPEX is required."""
    if precision != "bf16_master" or not ipex:
        return precision, why, ipex, ""
    if requested == "auto":
        return "bf16", why.replace("bf16_master", "bf16") + "; bf16, not bf16_master, beside IPEX", ipex, ""
    if ipex_requested is True:
        from workflow.scripts.common.errors import UserError

        raise UserError("train.precision bf16_master and train.ipex true cannot go together (IPEX optimizes "
                        "fp32 weights); set train.ipex: auto or false, or train.precision: bf16")
    return precision, why, False, "off: bf16_master keeps its own fp32 masters, which IPEX's optimizer would replace"
