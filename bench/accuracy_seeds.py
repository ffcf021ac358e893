"""Dev accuracy of cpuddp and the Trainer over several seeds (make bench's data).

    .venv/bin/python -m bench.accuracy_seeds [--seeds 42 7 1] [--epochs 3]

One run of train_bench --accuracy compares one seed per side, but the seed
alone moves dev accuracy on 400 pairs by several points. This trains the
Trainer (per-batch padding: same arithmetic as max-length padding, faster)
and cpuddp (fp32 and precision auto) once per seed, and prints every
accuracy and the means.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.train_bench import MODEL, prepare, run_cpuddp, run_trainer
from workflow.scripts.common import config as cfg
from workflow.scripts.common.snakemake_env import prepare_job_environment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 7, 1])
    parser.add_argument("--epochs", type=float, default=3.0)
    args = parser.parse_args()
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))
    model = cfg.resolve_model(MODEL)
    rows = {"trainer, pad per batch": lambda w, d, s: run_trainer(w, model, d, "batch", None, args.epochs, s),
            "cpuddp, fp32": lambda w, d, s: run_cpuddp(w, model, d, None, args.epochs, "fp32", s),
            "cpuddp, precision auto": lambda w, d, s: run_cpuddp(w, model, d, None, args.epochs, "auto", s)}
    accuracy = {name: [] for name in rows}
    with tempfile.TemporaryDirectory(prefix="cpuddp-seeds-") as tmp:
        work = Path(tmp)
        data = prepare(work, model)
        for seed in args.seeds:
            for name, run in rows.items():
                accuracy[name].append(run(work, data, seed)["accuracy"])
                print(f"seed {seed}: {name}: {accuracy[name][-1]:.4f}", flush=True)
    print(f"\n{'':26} " + " ".join(f"{'seed ' + str(s):>9}" for s in args.seeds) + f" {'mean':>8}")
    for name, values in accuracy.items():
        print(f"{name:26} " + " ".join(f"{v:9.4f}" for v in values) + f" {statistics.mean(values):8.4f}")


if __name__ == "__main__":
    main()
