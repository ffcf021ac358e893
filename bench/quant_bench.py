"""INT8 and inference speed on this CPU, with the CPU model and its int8 /
bf16 flags beside every figure, so that numbers from different CPUs are
never mixed up.

    make bench-quant                     # trains the demo model first if it is missing
    .venv/bin/python -m bench.quant_bench [--model M --data D --raw R --task T] [--json out.json]
    .venv/bin/python -m bench.quant_bench --others torch-dynamic,torchao-pt2e,onnxruntime  # other stacks too

Converts the fine-tuned model (default: the demo's) to fp32 OpenVINO as
convert_openvino does and quantizes it as quantize_static does (NNCF, the
same calibration rows), then times in ONE process, on the same rows, with
the workflow's own measurement (workflow/scripts/infer/speed.py: a warm-up
pass, then interleaved rounds, medians; batch-1 latency row by row): eager
PyTorch fp32, OpenVINO fp32 and OpenVINO int8, each OpenVINO model with
dynamic shapes and with fixed-length buckets. Metrics over the whole
validation set. Then the targets of README, Static INT8 quantization:

- on a CPU with int8 dot products (VNNI or AMX): int8 >= 1.5x fp32 in the
  same runtime (OpenVINO), within 1 point of fp32 on every task metric;
- on any CPU: the model deploy/ would hold (the workflow's own choice,
  infer/policy.py) >= 1.2x eager fp32, within 1 point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import datasets
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.quant_stacks import OTHERS
from workflow.scripts.common import tasks
from workflow.scripts.probes import hardware, versions
from workflow.scripts.common.errors import UserError, run_cli
from workflow.scripts.infer import artifacts, gate, int8, policy, runtime, speed, stacks
from workflow.scripts.infer.shapes import SHAPE_MODES, bucket_lengths
from workflow.scripts.settings.views import EvaluationSettings

TARGET_INT8, TARGET_DEPLOY, TARGET_POINTS = 1.5, 1.2, 1.0
OPENVINO = ("fp32_openvino", "int8")


def label(name: str) -> str:
    """fp32_openvino:buckets -> 'fp32 OpenVINO, buckets'."""
    base, _, mode = name.partition(":")
    return f"{policy.LABELS.get(base, base)}{', ' + mode if mode else ''}"


def workflow_candidates(model, task, calibration, work: Path, pad_id: int, buckets) -> dict:
    """Eager fp32 and every shape mode of OpenVINO fp32 and int8, as the workflow builds them."""
    outputs = artifacts.output_names(task)
    built = {"fp32_openvino": stacks.to_openvino(model, calibration[0], outputs),
             "int8": stacks.quantize_openvino(model, calibration, outputs)}
    models = {"fp32": (model, contextlib.nullcontext)}
    for name, ov_model in built.items():
        stacks.save_openvino(ov_model, work / name / artifacts.IR_FILE)
        for mode in SHAPE_MODES:
            loaded = stacks.load_ir(work / name, outputs, mode, buckets, pad_id)
            models[f"{name}:{mode}"] = (loaded, contextlib.nullcontext)
    return models


def other_candidates(names: str, model, calibration, work: Path) -> tuple[dict, dict]:
    models, skipped = {}, {}
    for name in filter(None, names.split(",")):
        if name not in OTHERS:
            raise UserError(f"--others: {name!r} is not one of {', '.join(OTHERS)}")
        try:
            built = OTHERS[name](model, calibration, work)
        except ImportError as err:
            skipped[name] = f"not installed ({err.name})"
            continue
        models.update({k: (v, contextlib.nullcontext) for k, v in built.items()})
    return models, skipped


def measure(models: dict, task, tokenized, raw, args, pad_id: int) -> dict:
    """name -> samples/s (median), latency, task metrics, as evaluate_runtimes measures them."""
    split = tokenized[task.validation_splits[0]]
    rows = speed.speed_split(split, args.rows)
    print(f"timing {len(models)} models: {len(rows)} rows x {args.rounds} rounds at batch {args.batch_size}, "
          f"{min(args.latency_rows, len(split))} rows at batch 1", file=sys.stderr)
    measured = speed.throughput(models, rows, args.batch_size, pad_id, args.rounds)
    latencies = speed.latency(models, split, pad_id, args.latency_rows)
    settings = EvaluationSettings.of({"batch_size": args.batch_size, "n_best_size": 20, "max_answer_length": 30,
                                      "null_score_diff_threshold": 0.0})
    result = {}
    for name, (model, autocast) in models.items():
        metrics = runtime.score(task, model, tokenized, raw, settings, pad_id, autocast)[0]
        result[name] = {**metrics, "samples_per_second": speed.median(measured[name]),
                        "rounds": [round(x, 2) for x in measured[name]], **latencies[name]}
    return result


def decorate(result: dict, task) -> None:
    """Speedups over eager fp32 and over fp32 in the same runtime, and the largest accuracy drop."""
    eager = result["fp32"]
    for name, row in result.items():
        row["speedup_vs_eager"] = policy.speedup(row, eager)
        row["max_drop_points"] = round(max(gate.accuracy_drops(task, eager, row).values(), default=0.0), 2)
        if name.startswith("int8:"):
            row["speedup_vs_fp32_same_runtime"] = policy.speedup(row, result["fp32_openvino:" + name.split(":")[1]])


def print_table(result: dict, task, tag: str) -> None:
    names = [m for m in next(iter(result.values())) if m.removesuffix("_mm") in task.metrics]
    head = (f"{'model':34} " + " ".join(f"{m[:8]:>8}" for m in names) + f" {'Δmax pt':>7} {'samples/s':>9} "
            f"{'x eager':>7} {'x fp32 OV':>9} {'p50 ms':>7} {'p99 ms':>7}  CPU")
    print(head)
    print("-" * len(head))
    for name, r in result.items():
        same = r.get("speedup_vs_fp32_same_runtime")
        print(f"{label(name):34} " + " ".join(f"{r[m]:8.4f}" for m in names) + f" {-r['max_drop_points']:+7.2f} "
              f"{r['samples_per_second']:9.1f} {r['speedup_vs_eager']:6.2f}x "
              f"{(f'{same:8.2f}x' if same else '        -'):>9} {r['latency_ms_p50']:7.2f} {r['latency_ms_p99']:7.2f}"
              f"  {tag}")


def best(result: dict, base: str) -> str:
    return speed.best_variant({n: [r["samples_per_second"]] for n, r in result.items()},
                              [f"{base}:{mode}" for mode in SHAPE_MODES])


def shapes_lines(result: dict, tag: str) -> None:
    for base in OPENVINO:
        dynamic, buckets = (result[f"{base}:{mode}"]["samples_per_second"] for mode in SHAPE_MODES)
        print(f"shapes {policy.LABELS[base]}: buckets {buckets:.1f} vs dynamic {dynamic:.1f} samples/s = "
              f"{buckets / dynamic:.2f}x; kept: {best(result, base).split(':')[1]}  {tag}")


def targets(result: dict, support: dict, tag: str) -> dict:
    """Both targets with their numbers; the deploy choice is the workflow's own."""
    fp32_ov, int8 = (result[best(result, base)] for base in OPENVINO)
    ratio = round(int8["samples_per_second"] / fp32_ov["samples_per_second"], 3)
    int8_ok = ratio >= TARGET_INT8 and int8["max_drop_points"] <= TARGET_POINTS
    applies = support["int8_expected_to_pay"]
    verdict = ("PASS" if int8_ok else "FAIL") if applies else "n/a here (no int8 dot-product instructions)"
    print(f"target int8 >= {TARGET_INT8}x fp32 OpenVINO within {TARGET_POINTS:g} point: {verdict} "
          f"({ratio:.2f}x, max drop {int8['max_drop_points']:.2f} points)  {tag}")
    entries = {"fp32": result["fp32"],
               "fp32_openvino": {**fp32_ov, "meets_accuracy_gate": fp32_ov["max_drop_points"] <= TARGET_POINTS},
               "int8": {**int8, "meets_accuracy_gate": int8["max_drop_points"] <= TARGET_POINTS,
                        "recommended": int8["max_drop_points"] <= TARGET_POINTS and ratio >= 1.0}}
    chosen, why = policy.choose_deploy(entries)
    deployed = entries[chosen]
    deploy_ok = deployed["speedup_vs_eager"] >= TARGET_DEPLOY and deployed["max_drop_points"] <= TARGET_POINTS
    print(f"target deploy/ ({policy.LABELS[chosen]}) >= {TARGET_DEPLOY}x eager fp32 within {TARGET_POINTS:g} point: "
          f"{'PASS' if deploy_ok else 'FAIL'} ({deployed['speedup_vs_eager']:.2f}x, max drop "
          f"{deployed['max_drop_points']:.2f} points)  {tag}")
    return {"int8_over_fp32_openvino": ratio, "int8_target": verdict, "deploy": chosen, "deploy_why": why,
            "deploy_speedup_vs_eager": deployed["speedup_vs_eager"], "deploy_target": "PASS" if deploy_ok else "FAIL"}


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="results/demo/default/model", help="fine-tuned save_pretrained folder")
    parser.add_argument("--data", default="results/demo/data/tokenized", help="tokenized DatasetDict folder")
    parser.add_argument("--raw", default="results/demo/data/raw", help="raw DatasetDict folder (SQuAD)")
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--calibration-samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=speed.ROUNDS)
    parser.add_argument("--rows", type=int, default=speed.SPEED_ROWS, help="rows timed for throughput")
    parser.add_argument("--batch-size", type=int, default=64, help="throughput batch (evaluation.batch_size)")
    parser.add_argument("--latency-rows", type=int, default=runtime.LATENCY_ROWS)
    parser.add_argument("--others", default="", help=f"comma list of other stacks: {', '.join(OTHERS)}")
    parser.add_argument("--work", default="results/quant_bench", help="folder for the artifacts")
    parser.add_argument("--json", help="also write every number here")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    for path in (args.model, args.data):
        if not Path(path).is_dir():
            raise UserError(f"{path} not found: run `make demo` first (or pass --model and --data)")
    from transformers import AutoTokenizer

    datasets.disable_progress_bars()
    task, cpu = tasks.get_task(args.task), hardware.cpu_summary()
    support, tag = hardware.low_precision_support(cpu["isa_flags"]), hardware.cpu_tag(cpu)
    threads = hardware.usable_cores(cpu)
    torch.set_num_threads(threads)
    found = versions.installed("torch", "openvino", "nncf")
    print(f"CPU {tag}, {threads} threads: {support['implies']}; " + ", ".join(f"{k} {v}" for k, v in found.items()))
    tokenized = datasets.load_from_disk(args.data)
    pad_id = AutoTokenizer.from_pretrained(args.model).pad_token_id
    calibration = int8.calibration_batches(int8.calibration_rows(tokenized["train"], args.calibration_samples),
                                           pad_id)
    model = runtime.load_for_eval(args.model, task)
    start, work = time.perf_counter(), Path(args.work)
    longest = max(len(ids) for s in task.validation_splits for ids in tokenized[s]["input_ids"])
    models = workflow_candidates(model, task, calibration, work, pad_id, bucket_lengths(longest))
    others, skipped = other_candidates(args.others, model, calibration, work)
    print(f"built the models in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    result = measure({**models, **others}, task, tokenized, args.raw, args, pad_id)
    decorate(result, task)
    print_table(result, task, tag)
    for name, why in skipped.items():
        print(f"{name:34} skipped: {why}")
    shapes_lines(result, tag)
    checked = targets(result, support, tag)
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": {**cpu, "low_precision": support, "tag": tag}, "versions": found,
                                               "threads": threads, "models": result, "targets": checked}, indent=2))


if __name__ == "__main__":
    run_cli(main)
