"""Side-by-side evaluation step (evaluate_runtimes): like with like.

fp32 in eager PyTorch (as evaluate_fp32 runs it), fp32 in OpenVINO
(convert_openvino) and int8 in OpenVINO (quantize_static, when it
quantized) are timed in this one process on the same rows (speed.py), each
OpenVINO model with dynamic and with bucketed shapes (shapes.py), the faster
kept. The OpenVINO models are scored on the whole validation set; the
accuracy gate holds them to the fp32 evaluation (quantization.max_accuracy_drop)
and the speed gate holds int8 to fp32 in the same runtime
(quantization.min_speedup). The model to deploy is the fastest that meets
the gates (policy.py). Writes eval_runtimes.json; deploy.py copies the model.
A slow int8 does not fail the rule: it is marked not recommended.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from workflow.scripts.common import tasks

from workflow.scripts.settings import step

from workflow.scripts.probes import hardware
from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.settings.views import QuantizationSettings, RuntimesView
from workflow.scripts.data.arrow_split import load_splits
from workflow.scripts.infer import artifacts, convert, gate, policy, runtime, speed, stacks
from workflow.scripts.infer.shapes import SHAPE_MODES, bucket_lengths

EAGER = "fp32"


def longest_row(tokenized, task) -> int:
    return max(len(ids) for split in task.validation_splits for ids in tokenized[split]["input_ids"])


def load_models(args, task, decisions, pad_id: int, buckets: list[int]) -> tuple[dict, dict]:
    """(variant -> (model, autocast), candidate -> its variants): eager fp32, and
    every shape mode of the OpenVINO fp32 and (if quantized) int8 models."""
    models = {EAGER: runtime.load_eager(args.model, task, decisions.precision, decisions.ipex)}
    variants = {EAGER: [EAGER]}
    loaders = {}
    if artifacts.why_not_converted(args.openvino) is None:  # else OpenVINO could not convert this architecture
        loaders["fp32_openvino"] = lambda mode: convert.load_converted(args.openvino, mode, buckets, pad_id)
    if artifacts.is_quantized(args.int8):
        if artifacts.read_meta(args.int8)["stack"] == "ipex":
            models["int8"], variants["int8"] = (stacks.load_quantized(args.int8), contextlib.nullcontext), ["int8"]
        else:
            loaders["int8"] = lambda mode: stacks.load_quantized(args.int8, shapes=mode, buckets=buckets,
                                                                 pad_id=pad_id)
    for name, load in loaders.items():
        variants[name] = [f"{name}:{mode}" for mode in SHAPE_MODES]
        for mode in SHAPE_MODES:
            models[f"{name}:{mode}"] = (load(mode), contextlib.nullcontext)
    return models, variants


def score_openvino(models: dict, variants: dict, task, tokenized, raw, settings: dict, pad_id: int,
                   out: Path) -> dict:
    """candidate -> task metrics of the OpenVINO models (or IPEX's TorchScript int8)
    over the whole validation set (with dynamic shapes: bucketed ones give the same outputs, shapes.py)."""
    entries = {}
    for name in ("fp32_openvino", "int8"):
        if name not in variants:
            continue
        model, autocast = models[variants[name][0]]
        result, samples, _, predictions = runtime.score(task, model, tokenized, raw, settings, pad_id, autocast)
        entries[name] = {**result, "samples": samples, "precision": "int8" if name == "int8" else "fp32",
                         "runtime": "openvino" if ":" in variants[name][0] else "torchscript+ipex"}
        if predictions is not None:
            write_json(out.with_name(f"{out.stem}_{name}_predictions.json"), predictions)
    return entries


def accuracy_gate(task, entries: dict, fp32: dict, settings: QuantizationSettings) -> None:
    """Both OpenVINO models against the fp32 evaluation (before any timing, so
    that a failure comes fast). An inaccurate int8 fails the rule only with
    enabled: true; otherwise it is not deployed."""
    max_drop = settings.max_accuracy_drop
    for entry in entries.values():
        ok, drops = gate.within_gate(task, fp32, entry, max_drop)
        entry.update({"accuracy_drop_points": drops, "meets_accuracy_gate": ok})
    int8 = entries.get("int8")
    if int8 and not int8["meets_accuracy_gate"] and settings.enabled is True:
        gate.check_accuracy_gate(task, fp32, int8, max_drop)


def time_candidates(models: dict, variants: dict, split, batch_size: int, pad_id: int) -> dict:
    """candidate -> timing: throughput of every variant side by side, the
    fastest variant of each candidate kept, then batch-1 latency of those."""
    rows = speed.speed_split(split, speed.SPEED_ROWS)
    measured = speed.throughput(models, rows, batch_size, pad_id, speed.ROUNDS)
    chosen = {name: speed.best_variant(measured, names) for name, names in variants.items()}
    latencies = speed.latency({name: models[v] for name, v in chosen.items()}, split, pad_id, speed.LATENCY_ROWS)
    timing = {"rows": len(rows), "rounds": speed.ROUNDS, "batch_size": batch_size,
              "latency_rows": min(speed.LATENCY_ROWS, len(split))}
    entries = {}
    for name, variant in chosen.items():
        entries[name] = {"samples_per_second": speed.median(measured[variant]), **latencies[name],
                         "timing": timing}
        if len(variants[name]) > 1:
            entries[name]["shapes"] = variant.split(":")[1]
            entries[name]["samples_per_second_by_shapes"] = {
                v.split(":")[1]: speed.median(measured[v]) for v in variants[name]}
    return entries


def speed_gate(entries: dict, settings: QuantizationSettings, int8_stack: str | None) -> str:
    """Speedups over eager fp32; int8 over fp32 in the same runtime against
    quantization.min_speedup; the int8 verdict."""
    for name in ("fp32_openvino", "int8"):
        if name in entries:
            entries[name]["speedup_vs_eager"] = policy.speedup(entries[name], entries[EAGER])
    int8 = entries.get("int8")
    if int8 is None:
        return ""
    same = "fp32" if int8_stack == "ipex" else "fp32_openvino"
    int8["speedup_vs_fp32_same_runtime"] = policy.speedup(int8, entries[same])
    recommended, why = policy.int8_verdict(int8["speedup_vs_fp32_same_runtime"], settings.min_speedup, same)
    if not int8["meets_accuracy_gate"]:
        recommended, why = False, (f"int8 is more than quantization.max_accuracy_drop {settings.max_accuracy_drop:g}"
                                   f" point(s) behind fp32 ({int8['accuracy_drop_points']}); not recommended")
    int8.update({"recommended": recommended, "recommendation": why})
    return why


def quantization_record(decision: dict, entries: dict, settings: QuantizationSettings, verdict: str,
                        deploy: str) -> dict:
    """What summary.json says about int8 on this CPU, and the note naming the faster artifact."""
    int8 = entries.get("int8")
    return {**{k: decision.get(k) for k in ("enabled", "quantize", "int8_expected_to_pay", "int8_dot_product",
                                            "reason", "cpu")},
            "min_speedup": settings.min_speedup, "max_accuracy_drop": settings.max_accuracy_drop,
            "int8_over_fp32_same_runtime": int8 and int8["speedup_vs_fp32_same_runtime"],
            "int8_recommended": int8 and int8["recommended"], "note": note(decision, int8, verdict, deploy)}


def note(decision: dict, int8: dict | None, verdict: str, deploy: str) -> str:
    """One line for the log and the summary: int8's verdict and what deploy/ holds."""
    where = f"deploy/ holds {policy.LABELS[deploy]} (from {policy.FOLDERS[deploy]}/)"
    if int8 is None:
        return f"{decision.get('reason', 'not quantized')}; {where}"
    if int8["recommended"]:
        return f"int8 recommended: {verdict}; {where}{_expectation(decision, True)}"
    return f"{verdict}; the faster artifact is {policy.LABELS[deploy]}: {where}{_expectation(decision, False)}"


def _expectation(decision: dict, recommended: bool) -> str:
    """How the measured verdict compares with what the CPU's flags led to expect."""
    if decision.get("int8_expected_to_pay") is None:
        return ""
    expected = bool(decision["int8_expected_to_pay"])
    if expected and not recommended:
        return f" (unexpected with {decision['int8_dot_product']} on this CPU)"
    if recommended and not expected:
        return " (although this CPU has no int8 dot-product instructions)"
    return "" if expected else " (as expected without int8 dot-product instructions)"


def evaluate_runtimes(args, config: RuntimesView, decisions) -> dict:
    """Everything eval_runtimes.json holds."""
    settings, gates = config.evaluation, config.quantization
    cpu = hardware.cpu_summary()
    torch.set_num_threads(hardware.usable_cores(cpu))
    pad_id = AutoTokenizer.from_pretrained(args.model).pad_token_id
    tokenized = load_splits(args.data)
    task = tasks.for_data(config.task, next(iter(tokenized.values())).features, settings.metric)
    buckets = bucket_lengths(longest_row(tokenized, task))
    models, variants = load_models(args, task, decisions, pad_id, buckets)
    entries = score_openvino(models, variants, task, tokenized, args.raw, settings, pad_id, Path(args.out))
    fp32 = read_json(args.fp32_metrics)
    accuracy_gate(task, entries, fp32, gates)
    entries[EAGER] = {**fp32, "precision": decisions.precision}
    timing = time_candidates(models, variants, tokenized[task.validation_splits[0]], settings.batch_size, pad_id)
    for name, entry in entries.items():
        entry.update(timing[name], model=policy.FOLDERS[name])
        if "shapes" in entry:
            entry["buckets"] = buckets if entry["shapes"] == "buckets" else None
    meta = artifacts.read_meta(args.int8)
    verdict = speed_gate(entries, gates, meta.get("stack"))
    deploy, why = policy.choose_deploy(entries)
    if dropped := artifacts.why_not_converted(args.openvino):
        why += f"; dropped: {dropped}"
    return {"cpu": {**cpu, "low_precision": hardware.low_precision_support(cpu["isa_flags"]),
                    "tag": hardware.cpu_tag(cpu)},
            "eval": {name: entries.get(name) for name in policy.CANDIDATES},
            "quantization": quantization_record(meta.get("decision") or {}, entries, gates, verdict, deploy),
            "deploy": {"candidate": deploy, "why": why}, "dropped": {"fp32_openvino": dropped} if dropped else {}}


def main(argv=None) -> None:
    parser = step.parser(__doc__.splitlines()[0], environment=True)
    parser.add_argument("--model", required=True, help="fine-tuned save_pretrained folder")
    parser.add_argument("--openvino", required=True, help="fp32 OpenVINO IR folder (convert_openvino)")
    parser.add_argument("--int8", required=True, help="folder of quantize_static (INT8 IR, or why not)")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--raw", required=True, help="raw DatasetDict folder (QA needs the contexts)")
    parser.add_argument("--fp32-metrics", required=True, help="eval_fp32.json: the accuracy gate's reference")
    parser.add_argument("--out", required=True, help="eval_runtimes.json to write")
    args = parser.parse_args(argv)
    result = evaluate_runtimes(args, step.read_view(args, RuntimesView), step.read_decisions(args))
    write_json(args.out, result)
    line = (f"evaluate_runtimes {result['cpu']['tag']}: " + ", ".join(
        f"{policy.LABELS[n]} {e['samples_per_second']:g} samples/s" for n, e in result["eval"].items() if e))
    for text in (line, result["quantization"]["note"]):
        print(text)
        print(text, file=sys.stderr)


if __name__ == "__main__":
    step.entry(main)
