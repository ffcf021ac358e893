"""Evaluation step: the task's metrics and samples/s of a saved model."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import datasets
import numpy as np
import torch
import transformers

from workflow.scripts.common import hardware, intel, tasks
from workflow.scripts.infer import metrics, qa
from workflow.scripts.common.atomic import write_json
from workflow.scripts.train.batching import PAD_KEYS, pad_collate
from workflow.scripts.common.errors import run_cli
from workflow.scripts.common.modeling import autocast_for

datasets.disable_progress_bars()
transformers.utils.logging.disable_progress_bar()
MODEL_INPUTS = PAD_KEYS
LATENCY_ROWS = 200  # batch-1 latency: the first rows of the first validation split
LATENCY_WARMUP = 5


def load_for_eval(model_dir: str, task: tasks.Task, int8: bool = False):
    """The fine-tuned model, or with int8 the artifact of quantize.py (called alike)."""
    if int8:
        from workflow.scripts.infer.quantize import load_quantized

        return load_quantized(model_dir)
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

    auto = AutoModelForQuestionAnswering if task.is_qa else AutoModelForSequenceClassification
    return auto.from_pretrained(model_dir).eval()


def batches(split, batch_size: int, pad_id: int):
    """Length-sorted batches (less padding), with each row's position."""
    lengths = np.array([len(ids) for ids in split["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    collate = pad_collate(pad_id)
    inputs = split.select_columns([k for k in MODEL_INPUTS if k in split.column_names])
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        yield index, collate([inputs[int(i)] for i in index]), lengths[index]


@torch.inference_mode()
def forward_all(model, split, batch_size: int, pad_id: int, autocast) -> tuple[list, float]:
    """Model outputs per row (in dataset order, unpadded) and the seconds spent."""
    outputs = [None] * len(split)
    start = time.perf_counter()
    for index, batch, lengths in batches(split, batch_size, pad_id):
        with autocast():
            out = model(**batch)
        if hasattr(out, "start_logits"):
            rows = zip(out.start_logits.float().numpy(), out.end_logits.float().numpy())
            for i, n, (s, e) in zip(index, lengths, rows):
                outputs[i] = (s[:n], e[:n])
        else:
            for i, logits in zip(index, out.logits.float().numpy()):
                outputs[i] = logits
    return outputs, time.perf_counter() - start


@torch.inference_mode()
def latency_ms(model, split, pad_id: int, autocast, rows: int = LATENCY_ROWS) -> dict:
    """p50 and p99 milliseconds of one sample at batch size 1 (after a warm-up)."""
    collate = pad_collate(pad_id)
    inputs = split.select_columns([k for k in MODEL_INPUTS if k in split.column_names])
    samples = [collate([inputs[i]]) for i in range(min(rows, len(split)))]
    times = []
    for j, batch in enumerate(samples[:LATENCY_WARMUP] + samples):
        start = time.perf_counter()
        with autocast():
            model(**batch)
        if j >= LATENCY_WARMUP:
            times.append(1000.0 * (time.perf_counter() - start))
    p50, p99 = np.percentile(times, [50, 99])
    return {"latency_ms_p50": round(float(p50), 3), "latency_ms_p99": round(float(p99), 3)}


def classification_metrics(task, model, split, batch_size, pad_id, autocast, suffix=""):
    logits, seconds = forward_all(model, split, batch_size, pad_id, autocast)
    logits = np.stack(logits)
    predictions = logits[:, 0] if task.is_regression else logits.argmax(-1)
    result = metrics.glue_metrics(task.name, predictions, np.array(split["labels"]))
    result = {f"{k}{suffix}": v for k, v in result.items()}
    return result, len(split), seconds


def qa_metrics(task, model, features, examples, batch_size, pad_id, autocast, settings):
    outputs, seconds = forward_all(model, features, batch_size, pad_id, autocast)
    predictions, _ = qa.postprocess_predictions(
        examples, features, [o[0] for o in outputs], [o[1] for o in outputs],
        version_2=task.name == "squad_v2",
        n_best_size=settings["n_best_size"], max_answer_length=settings["max_answer_length"],
        null_score_diff_threshold=settings["null_score_diff_threshold"])
    references = [{"id": e["id"], "answers": e["answers"]} for e in examples]
    result = metrics.squad_metrics(predictions, references, version_2=task.name == "squad_v2")
    return result, len(examples), seconds, predictions


def evaluate(config: dict, model_dir: str, tokenized_dir: str, raw_dir: str, precision: str,
             ipex: bool = False, int8: bool = False):
    """Metrics of every validation split, samples per second overall and
    batch-1 latency; int8: `model_dir` is an artifact of quantize.py."""
    task = tasks.get_task(config["task"])
    settings = config["evaluation"]
    torch.set_num_threads(hardware.usable_cores(hardware.cpu_summary()))
    from transformers import AutoTokenizer

    pad_id = AutoTokenizer.from_pretrained(model_dir).pad_token_id
    model = load_for_eval(model_dir, task, int8)
    precision = "fp32" if int8 else precision  # the int8 artifact fixes its own precisions
    if ipex and not int8:
        model = intel.optimize_inference(model, intel.torch_dtype(precision))
        print(f"IPEX optimized the model for inference ({precision}): "
              f"{intel.ipex_modules(model)} modules replaced", file=sys.stderr)
    autocast = autocast_for(precision)
    tokenized = datasets.load_from_disk(tokenized_dir)
    result, samples, seconds, predictions = {}, 0, 0.0, None
    for i, split in enumerate(task.validation_splits):
        if task.is_qa:
            examples = datasets.load_from_disk(raw_dir)[split]
            part, n, s, predictions = qa_metrics(task, model, tokenized[split], examples,
                                                 settings["batch_size"], pad_id, autocast, settings)
        else:
            part, n, s = classification_metrics(task, model, tokenized[split], settings["batch_size"],
                                                pad_id, autocast, suffix="_mm" if i else "")
        result.update(part)
        samples, seconds = samples + n, seconds + s
    result["samples"] = samples
    result["samples_per_second"] = round(samples / seconds, 3)
    result.update(latency_ms(model, tokenized[task.validation_splits[0]], pad_id, autocast))
    return result, predictions


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="evaluation configuration JSON")
    parser.add_argument("--environment", required=True, help="environment.json of the run")
    parser.add_argument("--model", required=True, help="save_pretrained folder")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--raw", required=True, help="raw DatasetDict folder (QA needs the contexts)")
    parser.add_argument("--out", required=True, help="metrics JSON to write")
    parser.add_argument("--int8", action="store_true", help="--model is an INT8 artifact of quantize.py")
    parser.add_argument("--fp32-metrics", help="int8 only: eval_fp32.json to hold the accuracy gate against")
    parser.add_argument("--max-accuracy-drop", type=float, default=1.0,
                        help="points int8 may lose on any task metric (with --fp32-metrics)")
    args = parser.parse_args(argv)
    config = json.loads(Path(args.config).read_text())
    info = json.loads(Path(args.environment).read_text())
    result, predictions = evaluate(config, args.model, args.data, args.raw, info["precision"],
                                   info.get("ipex", False), args.int8)
    if args.fp32_metrics:
        from workflow.scripts.infer.quantize import check_accuracy_gate

        print("eval: " + json.dumps(result), file=sys.stderr)
        check_accuracy_gate(tasks.get_task(config["task"]), json.loads(Path(args.fp32_metrics).read_text()),
                            result, args.max_accuracy_drop)
    if predictions is not None:
        out = Path(args.out)
        write_json(out.with_name(f"{out.stem}_predictions.json"), predictions)
    write_json(args.out, result)
    print("eval: " + json.dumps(result))


if __name__ == "__main__":
    run_cli(main)
