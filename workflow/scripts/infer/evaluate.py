"""Evaluation step: the task's metrics and samples/s of a saved model.

Loading and running the model (fp32 or an INT8 artifact) is runtime.py's;
the INT8 accuracy gate is gate.py's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import datasets
import numpy as np
import torch
from transformers import AutoTokenizer

from workflow.scripts.common import hardware, intel, step, tasks
from workflow.scripts.common.atomic import write_json
from workflow.scripts.common.modeling import autocast_for
from workflow.scripts.infer import metrics, qa
from workflow.scripts.infer.gate import check_accuracy_gate
from workflow.scripts.infer.runtime import forward_all, latency_ms, load_for_eval


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
    parser = step.parser(__doc__, environment=True)
    parser.add_argument("--model", required=True, help="save_pretrained folder")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--raw", required=True, help="raw DatasetDict folder (QA needs the contexts)")
    parser.add_argument("--out", required=True, help="metrics JSON to write")
    parser.add_argument("--int8", action="store_true", help="--model is an INT8 artifact of quantize.py")
    parser.add_argument("--fp32-metrics", help="int8 only: eval_fp32.json to hold the accuracy gate against")
    parser.add_argument("--max-accuracy-drop", type=float, default=1.0,
                        help="points int8 may lose on any task metric (with --fp32-metrics)")
    args = parser.parse_args(argv)
    config, decisions = step.read_config(args), step.read_decisions(args)
    result, predictions = evaluate(config, args.model, args.data, args.raw, decisions.precision,
                                   decisions.ipex, args.int8)
    if args.fp32_metrics:
        print("eval: " + json.dumps(result), file=sys.stderr)
        check_accuracy_gate(tasks.get_task(config["task"]), json.loads(Path(args.fp32_metrics).read_text()),
                            result, args.max_accuracy_drop)
    if predictions is not None:
        out = Path(args.out)
        write_json(out.with_name(f"{out.stem}_predictions.json"), predictions)
    write_json(args.out, result)
    print("eval: " + json.dumps(result))


if __name__ == "__main__":
    step.entry(main)
