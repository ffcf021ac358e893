"""Training samples/s of cpuddp in this Python environment, fp32 and bf16
(for make bench-intel: the default env and the Intel env, torch 2.8 + IPEX
2.8, one after the other on the same CPU and data).

    python -m bench.env_bench [--steps 48] [--label default]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from bench.train_bench import MODEL, full_config, prepare
from workflow.scripts.settings import config as cfg
from workflow.scripts.probes import hardware
from workflow.scripts.common.errors import UserError
from workflow.scripts.probes.matmul import matmul_gflops
from workflow.helpers.snakemake_env import prepare_job_environment
from workflow.scripts.train.runs import run_training


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--label", default="this env")
    args = parser.parse_args()
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))
    cpu = hardware.cpu_summary()
    model = cfg.resolve_model(MODEL)
    precisions = ["fp32"] + (["bf16"] if hardware.has_native_bf16(cpu["isa_flags"]) else [])
    with tempfile.TemporaryDirectory(prefix="cpuddp-envbench-") as tmp:
        data = prepare(Path(tmp), model)
        for precision in precisions:
            out = Path(tmp) / precision
            out.mkdir()
            start = time.perf_counter()
            try:
                info, metrics = run_training(full_config(model, args.steps, precision), str(data), out, "env bench")
            except UserError as err:  # bf16 that measures slower than fp32 here is refused, not run
                gflops = {str(d).split(".")[-1]: round(matmul_gflops(d), 1) for d in (torch.float32, torch.bfloat16)}
                print(f"{args.label}: torch {torch.__version__}, {precision}: refused ({err}); matmul GFLOP/s "
                      f"{gflops} "
                      f"{hardware.cpu_tag(cpu)} {time.strftime('%Y-%m-%d')}", flush=True)
                continue
            print(f"{args.label}: torch {torch.__version__}, ipex {info['ipex']}, {precision}: "
                  f"{metrics['train_samples_per_second']:.2f} samples/s ({time.perf_counter() - start:.0f} s wall) "
                  f"{hardware.cpu_tag(cpu)} {time.strftime('%Y-%m-%d')}", flush=True)


if __name__ == "__main__":
    main()
