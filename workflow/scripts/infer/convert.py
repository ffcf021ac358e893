"""fp32 OpenVINO step (convert_openvino): the fine-tuned model as OpenVINO IR.

The one conversion of a run (stacks.to_openvino, dynamic batch and
length), which quantize.py also starts from, saved without compression as `openvino_model.xml/.bin`
beside the tokenizer and config.json, so that evaluate_runtimes compares
int8 with fp32 in the same runtime, and so that fp32 OpenVINO can be the
deployed model where it is the fastest. `convert.json`, written last,
records the versions and inputs.
"""

from __future__ import annotations

import json
import sys

from transformers import AutoTokenizer

from workflow.scripts.common import tasks

from workflow.scripts.settings import step

from workflow.scripts.probes import versions
from workflow.scripts.common.atomic import atomic_dir, write_json
from workflow.scripts.settings.views import ConvertView
from workflow.scripts.infer import artifacts, stacks
from workflow.scripts.infer.runtime import load_for_eval, model_inputs
from workflow.scripts.data.arrow_split import ArrowSplit
from workflow.scripts.data.batching import pad_collate

META_FILE = artifacts.CONVERT_META_FILE


def convert(model_dir, tokenized_dir, out_dir, task_name: str) -> dict:
    """Convert, save into `out_dir` atomically; return the metadata."""
    task = tasks.for_data(task_name)  # the model folder holds its own labels
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_for_eval(str(model_dir), task)
    train = ArrowSplit.load(tokenized_dir, "train")
    example = pad_collate(tokenizer.pad_token_id)([model_inputs(train)[0]])
    outputs = artifacts.output_names(task)
    try:
        converted = stacks.to_openvino(model, example, outputs)
    except Exception as err:  # an architecture OpenVINO cannot take: the candidate drops out, the run goes on
        return not_converted(out_dir, stacks.unconvertible(model.config.model_type, err))
    with atomic_dir(out_dir) as tmp:
        tokenizer.save_pretrained(tmp)
        model.config.save_pretrained(tmp)
        stacks.save_openvino(converted, tmp / artifacts.IR_FILE)
        meta = {
            "stack": "openvino",
            "precision": "fp32",
            "format": "OpenVINO IR",
            "versions": versions.installed("torch", "transformers", "openvino"),
            "task": task.name,
            "source_model": str(model_dir),
            "inputs": list(example),
            "outputs": list(outputs),
            "converted": True,
        }
        write_json(tmp / META_FILE, meta)  # last: its presence marks a finished artifact
    return meta


def not_converted(out_dir, reason: str) -> dict:
    """The folder of a model OpenVINO could not convert: only convert.json, saying why."""
    meta = {"stack": "openvino", "converted": False, "reason": reason}
    with atomic_dir(out_dir) as tmp:
        write_json(tmp / META_FILE, meta)
    return meta


def load_converted(model_dir, shapes: str = "dynamic", buckets=None, pad_id: int = 0, threads: int | None = None):
    """The fp32 IR of `model_dir` (made by this step), ready to call."""
    meta = artifacts.read_meta(model_dir, META_FILE, "convert_openvino", "OpenVINO fp32 model")
    return stacks.load_ir(model_dir, meta["outputs"], shapes, buckets, pad_id, threads)


def main(argv=None) -> None:
    parser = step.parser(__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="fine-tuned save_pretrained folder")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder (an example input)")
    parser.add_argument("--out", required=True, help="OpenVINO IR folder to write")
    args = parser.parse_args(argv)
    meta = convert(args.model, args.data, args.out, step.read_view(args, ConvertView).task)
    print("convert: " + json.dumps(meta), file=sys.stderr)
    if not meta["converted"]:
        print(f"convert_openvino: {meta['reason']}")


if __name__ == "__main__":
    step.entry(main)
