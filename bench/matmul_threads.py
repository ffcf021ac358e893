"""How far two threads of one rank (the 1 x 2 layout) take a matmul: GFLOP/s
of BERT-base training's linear-layer matmuls, fp32, on one and two threads, as
autograd runs them: forward addmm(b, x, W.t()), dX = g @ W, dW = g.t() @ x,
over the 1,722 real tokens of bench.step_profile's batch of 32 at MRPC's
median lengths; best of three 1-second loops each (probes/matmul.py's timer).

    python -m bench.matmul_threads
"""

from __future__ import annotations

import torch

from workflow.scripts.probes.matmul import product_gflops

TOKENS = 1722
LAYERS = {"qkvo 768->768": (768, 768), "ffn_in 768->3072": (768, 3072), "ffn_out 3072->768": (3072, 768)}


def cases(k: int, n: int) -> dict:
    x, w, b, g = torch.randn(TOKENS, k), torch.randn(n, k), torch.randn(n), torch.randn(TOKENS, n)
    return {"fwd": lambda: torch.addmm(b, x, w.t()), "dX": lambda: torch.mm(g, w), "dW": lambda: torch.mm(g.t(), x)}


def gflops(product, flops: int, threads: int) -> float:
    torch.set_num_threads(threads)
    return product_gflops(product, flops, seconds=1.0, best_of=3)


def main() -> None:
    from workflow.scripts.probes import hardware

    print(f"CPU {hardware.cpu_tag(hardware.cpu_summary())}; torch {torch.__version__}; {TOKENS} tokens")
    for layer, (k, n) in LAYERS.items():
        for kind, fn in cases(k, n).items():
            one, two = gflops(fn, 2 * TOKENS * k * n, 1), gflops(fn, 2 * TOKENS * k * n, 2)
            print(f"{layer:18s} {kind:3s} 1 thread {one:6.1f}  2 threads {two:6.1f} GFLOP/s ({two / one:.2f}x)")


if __name__ == "__main__":
    main()
