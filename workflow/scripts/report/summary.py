"""Summary step: one summary.json for the experiment, one entry per run."""

from __future__ import annotations

import argparse
from pathlib import Path

from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.errors import run_cli
from workflow.scripts.common.candidates import CANDIDATES
from workflow.scripts.common import superseded
from workflow.scripts.settings.sweep import named_values
from workflow.scripts.report import glue_table, table, tracked
from workflow.scripts.report.runs import DEPLOY_FILE, ENVIRONMENT, RUNTIMES, read_environment, read_train_metrics


def _optional(path: Path):
    """A JSON file that a run may lack (eval_runtimes.json without quantization)."""
    return read_json(path) if path.is_file() else None


def evaluations(run_dir: Path) -> tuple[dict, dict]:
    """(eval, quantization) of a run. With the side-by-side evaluation, its
    numbers for all three models (eager fp32's metrics stay evaluate_fp32's);
    without it, eval_fp32.json, and fp32_openvino and int8 null."""
    fp32 = read_json(run_dir / "eval_fp32.json")
    runtimes = _optional(run_dir / RUNTIMES)
    if runtimes is None:
        return ({"fp32": fp32, "fp32_openvino": None, "int8": None},
                {"enabled": False, "quantize": False, "reason": "quantization.enabled false"})
    evals = {name: runtimes["eval"].get(name) for name in CANDIDATES}
    evals["fp32"] = {**fp32, **(evals["fp32"] or {})}
    return evals, runtimes["quantization"]


def deployment(run_dir: Path) -> dict | None:
    """The deployed model: its folder and deploy.json (None before deploy_model ran)."""
    meta = _optional(run_dir / "deploy" / DEPLOY_FILE)
    return None if meta is None else {"path": str(run_dir / "deploy"), **meta}


def run_entry(name: str, run_dir: Path) -> dict:
    """The summary.json entry of one run folder (fields: DESIGN.md)."""
    env = read_environment(run_dir)
    train = read_train_metrics(run_dir)
    evals, quantization = evaluations(run_dir)
    return {
        "run": name,
        "nodes": env["nodes"],
        "processes_per_node": env["processes_per_node"],
        # how the ranks x threads were chosen: set, or measured / cached (processes_per_node auto) with the table
        "layout": {**env.get("layout", {}), "reason": env.get("layout_reason")} if env.get("layout_reason") else None,
        "world_size": train["world_size"],
        "hosts": [h for h in dict.fromkeys(r.get("host") for r in train["ranks"]) if h],  # nodes used, rank 0's first
        "threads_per_process": train["threads_per_process"],
        "backend": train["backend"],
        "mpi": f"{env['mpi']['flavour']} {env['mpi']['version']}",
        "precision": train["precision"],
        "epochs": train["epochs"],
        "batch_size_per_rank": train.get("batch_size_per_rank"),  # a measured layout's split of the global batch
        "gradient_accumulation_steps": train.get("gradient_accumulation_steps", 1),
        "global_batch": train.get("global_batch"),
        "steps": train["steps"],
        "train_seconds": train["train_seconds"],
        "train_samples_per_second": train["train_samples_per_second"],
        "final_loss": train["final_loss"],
        "peak_rss_mb_per_rank": [r["peak_rss_mb"] for r in train["ranks"]],
        "allreduce_wait_share": train.get("allreduce_wait_share"),
        "resumed_from_step": train.get("resumed_from_step"),
        "superseded_checkpoints": superseded.listed(run_dir),  # training a rerun moved aside, kept
        # evaluation.every: which step's model won, by which metric, and every evaluation (null when off)
        "training_evaluation": train.get("evaluation"),
        "tries": _optional(run_dir / "tries.json"),
        "eval": evals,
        "quantization": quantization,
        "deploy": deployment(run_dir),
        "model": str(run_dir / "model"),
        "environment": str(run_dir / ENVIRONMENT),
    }


def add_scaling(entries: list[dict]) -> None:
    """Speedup and scaling efficiency of each run against the first (baseline).

    speedup = throughput / baseline throughput (the time ratio when the runs
    train on the same samples, as with `epochs`; still right when `max_steps`
    stops them early); ideal_speedup = cores / baseline cores (ranks x
    threads); scaling_efficiency = speedup / ideal_speedup.
    """
    base = entries[0]
    for entry in entries:
        speedup = entry["train_samples_per_second"] / base["train_samples_per_second"]
        ideal = _cores(entry) / _cores(base)
        entry["speedup"] = round(speedup, 3)
        entry["ideal_speedup"] = round(ideal, 3)
        entry["scaling_efficiency"] = round(speedup / ideal, 3)


def _cores(entry: dict) -> int:
    return entry["world_size"] * entry["threads_per_process"]


def summarize(experiment: str, results_dir: Path, runs: list[str], settings: dict | None = None) -> dict:
    """summary.json: one entry per run, the first run the scaling baseline;
    with a sweep, each entry's swept values, and over task or seed the table."""
    entries = [run_entry(name, results_dir / name) for name in runs]
    add_scaling(entries)
    summary = {"experiment": experiment, "baseline": entries[0]["run"], "runs": entries}
    sweep = table.sweep_of(settings or {})
    if sweep:
        values = named_values(sweep)
        for entry in entries:
            entry["sweep"] = values.get(entry["run"], {})
    if glue_table.wanted(sweep):
        summary["table"] = table.from_summary(settings, summary)
    return summary


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--results", required=True, help="results/<experiment> folder")
    parser.add_argument("--run", action="append", required=True, help="run name (baseline first)")
    parser.add_argument("--config", help="report settings JSON (the sweep, for the table)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    settings = read_json(args.config) if args.config else None
    summary = summarize(args.experiment, Path(args.results), args.run, settings)
    write_json(args.out, summary)
    tracked.attach(Path(args.results), summary, Path(args.out))  # report.trackers: mlflow
    print(f"summary: {args.out}")


if __name__ == "__main__":
    run_cli(main)
