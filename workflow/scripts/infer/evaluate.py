"""Evaluation step (evaluate_fp32): the task's metrics, samples/s and batch-1
latency of the fine-tuned model in eager PyTorch, as the run decided it
(precision, IPEX). The OpenVINO fp32 and int8 models are measured beside it
by runtimes.py (evaluate_runtimes). The evaluated folder's model card
(README.md) then gets these metrics and the data: a file of the train
rule's folder that Snakemake does not time (it reads the folder's
.snakemake_timestamp), so nothing reruns for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoTokenizer

from workflow.scripts.common import card, tasks

from workflow.scripts.settings import step

from workflow.scripts.probes import hardware
from workflow.scripts.common.atomic import write_json
from workflow.scripts.data.arrow_split import load_splits
from workflow.scripts.settings.views import EvaluateView
from workflow.scripts.infer.runtime import latency_ms, load_eager, score


def evaluate(config: EvaluateView, model_dir: str, tokenized_dir: str, raw_dir: str, precision: str,
             ipex: bool = False):
    """Metrics of every validation split, samples per second overall and batch-1 latency."""
    tokenized = load_splits(tokenized_dir)
    task = tasks.for_data(config.task, next(iter(tokenized.values())).features, config.evaluation.metric)
    cpu = hardware.cpu_summary()
    torch.set_num_threads(hardware.usable_cores(cpu))
    pad_id = AutoTokenizer.from_pretrained(model_dir).pad_token_id
    model, autocast = load_eager(model_dir, task, precision, ipex)
    result, samples, seconds, predictions = score(task, model, tokenized, raw_dir, config.evaluation,
                                                  pad_id, autocast)
    result["samples"] = samples
    result["samples_per_second"] = round(samples / seconds, 3)
    result.update(latency_ms(model, tokenized[task.validation_splits[0]], pad_id, autocast))
    result.update({"runtime": "torch+ipex" if ipex else "torch", "precision": precision,
                   "cpu": hardware.cpu_tag(cpu)})
    return result, predictions


def main(argv=None) -> None:
    parser = step.parser(__doc__, environment=True)
    parser.add_argument("--model", required=True, help="save_pretrained folder")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--raw", required=True, help="raw DatasetDict folder (QA needs the contexts)")
    parser.add_argument("--out", required=True, help="metrics JSON to write")
    args = parser.parse_args(argv)
    config, decisions = step.read_view(args, EvaluateView), step.read_decisions(args)
    result, predictions = evaluate(config, args.model, args.data, args.raw, decisions.precision, decisions.ipex)
    if predictions is not None:
        out = Path(args.out)
        write_json(out.with_name(f"{out.stem}_predictions.json"), predictions)
    write_json(args.out, result)
    features = next(iter(load_splits(args.data).values())).features  # own data's labels: its metrics
    task = tasks.for_data(config.task, features, config.evaluation.metric)
    card.add_evaluation(args.model, task, result, config.data)  # model/'s final card
    print("eval: " + json.dumps(result))


if __name__ == "__main__":
    step.entry(main)
