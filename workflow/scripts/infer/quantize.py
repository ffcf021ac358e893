"""Static INT8 quantization step: calibrate, quantize, save, reload, verify.

The fine-tuned model (save_pretrained folder) is converted to OpenVINO and
quantized by NNCF: activation ranges come from N training samples, every
Linear layer gets INT8 weights (per channel) and INT8 activations (per
tensor), and the result is saved as OpenVINO IR (`openvino_model.xml/.bin`,
the layout optimum-intel also reads) beside the tokenizer and config.json.
docs/quantization.md has the measurements behind this choice.

The step then loads the artifact back from disk and requires its outputs on
the evaluation set to equal the in-memory quantized model's, and checks that
the CPU plugin really runs every Linear layer in INT8. `quantize.json`,
written last, records the stack, versions, calibration and the checks.

`stack: ipex` quantizes with Intel Extension for PyTorch instead (TorchScript
artifact), when it is installed with the torch it pairs with.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from workflow.scripts.common import hardware, intel, tasks
from workflow.scripts.common.atomic import atomic_dir, read_json, write_json
from workflow.scripts.train.batching import PAD_KEYS, pad_collate
from workflow.scripts.common.errors import UserError, run_cli

STACKS = ("openvino", "ipex")
IR_FILE = "openvino_model.xml"
TORCHSCRIPT_FILE = "model_int8.pt"
META_FILE = "quantize.json"
CALIBRATION_SEED = 0
VERIFY_BATCH_SIZE = 64
# OpenVINO CPU layer types of Linear layers, and the precisions that mean INT8.
LINEAR_LAYER_TYPES = ("FullyConnected",)
INT8_PRECISIONS = ("u8", "i8")


def output_names(task: tasks.Task) -> tuple[str, ...]:
    return ("start_logits", "end_logits") if task.is_qa else ("logits",)


def versions(stack: str) -> dict:
    packages = ("openvino", "nncf") if stack == "openvino" else (intel.IPEX_PACKAGE,)
    found = {}
    for name in ("torch", "transformers", *packages):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    return found


# ---------------------------------------------------------------- calibration

def calibration_rows(train, samples: int, seed: int = CALIBRATION_SEED) -> list[dict]:
    """`samples` rows of the tokenized train split (seeded), model inputs only."""
    keys = [k for k in PAD_KEYS if k in train.column_names]
    count = min(samples, len(train))
    picked = np.sort(np.random.default_rng(seed).choice(len(train), count, replace=False))
    return [train.select_columns(keys)[int(i)] for i in picked]


def calibration_batches(rows: list[dict], pad_id: int) -> list[dict]:
    """One sample per batch: calibration statistics never see padding."""
    collate = pad_collate(pad_id)
    return [collate([row]) for row in rows]


# ---------------------------------------------------------------- OpenVINO

class _TupleOutputs(torch.nn.Module):
    """The HF model with keyword inputs and a tuple of its logits (for tracing)."""

    def __init__(self, model, outputs: tuple[str, ...]):
        super().__init__()
        self.model, self.outputs = model, outputs

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        given = {"attention_mask": attention_mask, "token_type_ids": token_type_ids}
        out = self.model(input_ids=input_ids, **{k: v for k, v in given.items() if v is not None})
        return tuple(getattr(out, name) for name in self.outputs)


def to_openvino(model, example: dict, outputs: tuple[str, ...]):
    """The fp32 model as an OpenVINO model with dynamic batch and length."""
    import openvino as ov

    inputs = [(name, ov.PartialShape([-1, -1]), ov.Type.i64) for name in example]
    with torch.no_grad():
        converted = ov.convert_model(_TupleOutputs(model.eval(), outputs), example_input=dict(example),
                                     input=inputs)
    for port, name in zip(converted.outputs, outputs):
        port.get_tensor().set_names({name})
    return converted


def quantize_openvino(model, calibration: list[dict], outputs: tuple[str, ...]):
    """NNCF post-training static quantization (transformer preset, SmoothQuant)."""
    import nncf

    converted = to_openvino(model, calibration[0], outputs)
    names = [port.get_any_name() for port in converted.inputs]
    dataset = nncf.Dataset([{k: batch[k].numpy() for k in names} for batch in calibration])
    return nncf.quantize(converted, dataset, model_type=nncf.ModelType.TRANSFORMER,
                         subset_size=len(calibration))


def compile_openvino(ov_model, threads: int | None = None):
    """Compiled for this CPU: fp32 for the non-quantized ops (never bf16 by
    default on AMX machines), one stream using `threads` cores."""
    import openvino as ov

    threads = threads or hardware.usable_cores(hardware.cpu_summary())
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
              "INFERENCE_PRECISION_HINT": "f32"}
    return ov.Core().compile_model(ov_model, "CPU", config)


def int8_linear_layers(compiled) -> tuple[int, int, list[str]]:
    """(INT8 Linear layers, all Linear layers, names of the others) as run."""
    total, int8, other = 0, 0, []
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if info["layerType"].astype(str) not in LINEAR_LAYER_TYPES:
            continue
        total += 1
        if info["runtimePrecision"].astype(str) in INT8_PRECISIONS:
            int8 += 1
        else:
            other.append(op.get_friendly_name())
    return int8, total, other


class QuantizedModel:
    """An INT8 artifact called like a HF model: model(**batch).logits
    (or .start_logits / .end_logits for QA), torch tensors in and out."""

    def __init__(self, run, outputs: tuple[str, ...], inputs: tuple[str, ...]):
        self._run, self.outputs, self.inputs = run, outputs, inputs

    def __call__(self, **batch):
        from transformers.modeling_outputs import QuestionAnsweringModelOutput, SequenceClassifierOutput

        feed = {k: batch[k] for k in self.inputs}
        result = self._run(feed)
        if "start_logits" in self.outputs:
            return QuestionAnsweringModelOutput(start_logits=result["start_logits"], end_logits=result["end_logits"])
        return SequenceClassifierOutput(logits=result["logits"])

    def eval(self):
        return self


def _openvino_runner(compiled, outputs):
    request = compiled.create_infer_request()

    def run(feed: dict) -> dict:
        result = request.infer({k: v.numpy() for k, v in feed.items()})
        return {name: torch.from_numpy(np.array(result[name])) for name in outputs}
    return run


def _wrap_openvino(compiled, outputs) -> QuantizedModel:
    inputs = tuple(port.get_any_name() for port in compiled.inputs)
    return QuantizedModel(_openvino_runner(compiled, outputs), tuple(outputs), inputs)


# ---------------------------------------------------------------- IPEX

def _require_ipex():
    """The IPEX module, or UserError naming what to install (before importing it)."""
    found = intel.installed_versions()
    if not found[intel.IPEX_MODULE]:
        raise UserError(f"quantization.stack ipex needs {intel.IPEX_PACKAGE}, which is not installed: "
                        f"pip install torch==2.8.0 {intel.IPEX_PACKAGE}=={intel.IPEX_LAST} (README, Intel stack), "
                        "or set quantization.stack: openvino")
    intel.check_pairing(found, ipex=True, ccl=False)
    return intel._import_ipex()


def quantize_ipex(model, calibration: list[dict]):
    """IPEX static quantization, traced and frozen to TorchScript."""
    ipex = _require_ipex()
    from intel_extension_for_pytorch.quantization import convert, prepare

    model.config.return_dict = False
    example = calibration[0]
    prepared = prepare(model.eval(), ipex.quantization.default_static_qconfig_mapping,
                       example_kwarg_inputs=example, inplace=False)
    with torch.no_grad():
        for batch in calibration:
            prepared(**batch)
        traced = torch.jit.trace(convert(prepared), example_kwarg_inputs=example, strict=False)
        return torch.jit.freeze(traced)


def _wrap_torchscript(module, outputs, inputs) -> QuantizedModel:
    def run(feed: dict) -> dict:
        with torch.no_grad():
            result = module(**feed)
        return dict(zip(outputs, result if isinstance(result, (tuple, list)) else (result,)))
    return QuantizedModel(run, tuple(outputs), tuple(inputs))


# ---------------------------------------------------------------- artifact

def load_quantized(model_dir, threads: int | None = None) -> QuantizedModel:
    """The saved INT8 model of `model_dir` (made by `quantize`), ready to call."""
    model_dir = Path(model_dir)
    if not (model_dir / META_FILE).is_file():
        raise UserError(f"{model_dir} is not a finished INT8 artifact (no {META_FILE}); rerun quantize_static")
    meta = read_json(model_dir / META_FILE)
    if meta["stack"] == "ipex":
        _require_ipex()
        module = torch.jit.load(str(model_dir / TORCHSCRIPT_FILE))
        return _wrap_torchscript(module, meta["outputs"], meta["inputs"])
    import openvino as ov

    compiled = compile_openvino(ov.Core().read_model(model_dir / IR_FILE), threads)
    return _wrap_openvino(compiled, meta["outputs"])


def max_abs_diff(first: list, second: list) -> float:
    """Largest difference between two forward_all results (rows of arrays)."""
    worst = 0.0
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            if x.shape != y.shape:
                return float("inf")
            worst = max(worst, float(np.max(np.abs(x - y), initial=0.0)))
    return worst


def verify_reload(in_memory: QuantizedModel, reloaded: QuantizedModel, tokenized, task, pad_id,
                  batch_size: int = VERIFY_BATCH_SIZE) -> dict:
    """Outputs of both on every validation split must be equal."""
    import contextlib

    from workflow.scripts.infer.evaluate import forward_all

    rows, worst = 0, 0.0
    for split in task.validation_splits:
        first, _ = forward_all(in_memory, tokenized[split], batch_size, pad_id, contextlib.nullcontext)
        second, _ = forward_all(reloaded, tokenized[split], batch_size, pad_id, contextlib.nullcontext)
        rows, worst = rows + len(first), max(worst, max_abs_diff(first, second))
    if worst != 0.0:
        raise UserError(f"the reloaded INT8 model differs from the quantized model in memory "
                        f"(max abs diff {worst:g} over {rows} evaluation rows); the artifact is not kept")
    return {"rows": rows, "max_abs_diff": worst}


def _save_and_reload(stack, quantized, tmp: Path, outputs, inputs, threads):
    """Write the artifact into `tmp`: (in-memory model, reloaded model, facts)."""
    if stack == "ipex":
        torch.jit.save(quantized, str(tmp / TORCHSCRIPT_FILE))
        reloaded = torch.jit.load(str(tmp / TORCHSCRIPT_FILE))
        return _wrap_torchscript(quantized, outputs, inputs), _wrap_torchscript(reloaded, outputs, inputs), {}
    import openvino as ov

    ov.save_model(quantized, tmp / IR_FILE, compress_to_fp16=False)
    reloaded = compile_openvino(ov.Core().read_model(tmp / IR_FILE), threads)
    int8, total, other = int8_linear_layers(reloaded)
    if total == 0 or other:
        raise UserError(f"only {int8} of {total} Linear layers run in INT8 on this CPU "
                        f"(not: {', '.join(other[:5])}); the artifact is not kept")
    in_memory = compile_openvino(quantized, threads)
    facts = {"int8_linear_layers": int8, "linear_layers": total}
    return _wrap_openvino(in_memory, outputs), _wrap_openvino(reloaded, outputs), facts


def quantize(model_dir, tokenized_dir, out_dir, task_name: str, calibration_samples: int,
             stack: str = "openvino", threads: int | None = None) -> dict:
    """Quantize, save into `out_dir` atomically, reload, verify; return the metadata."""
    import datasets
    from transformers import AutoTokenizer

    from workflow.scripts.infer.evaluate import load_for_eval

    if stack not in STACKS:
        raise UserError(f"quantization.stack: {stack!r} is not one of {', '.join(STACKS)}")
    task = tasks.get_task(task_name)
    threads = threads or hardware.usable_cores(hardware.cpu_summary())
    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_for_eval(str(model_dir), task)
    tokenized = datasets.load_from_disk(str(tokenized_dir))
    rows = calibration_rows(tokenized["train"], calibration_samples)
    calibration = calibration_batches(rows, tokenizer.pad_token_id)
    outputs, inputs = output_names(task), tuple(calibration[0])
    start = time.perf_counter()
    quantized = (quantize_ipex(model, calibration) if stack == "ipex"
                 else quantize_openvino(model, calibration, outputs))
    seconds = time.perf_counter() - start
    with atomic_dir(out_dir) as tmp:
        tokenizer.save_pretrained(tmp)
        model.config.save_pretrained(tmp)
        in_memory, reloaded, facts = _save_and_reload(stack, quantized, tmp, outputs, inputs, threads)
        check = verify_reload(in_memory, reloaded, tokenized, task, tokenizer.pad_token_id)
        meta = {
            "stack": stack,
            "format": "TorchScript" if stack == "ipex" else "OpenVINO IR",
            "versions": versions(stack),
            "task": task.name,
            "source_model": str(model_dir),
            "calibration_samples": len(rows),
            "calibration_split": "train",
            "calibration_seed": CALIBRATION_SEED,
            "inputs": list(inputs),
            "outputs": list(outputs),
            "quantize_seconds": round(seconds, 3),
            **facts,
            "verification": check,
        }
        write_json(tmp / META_FILE, meta)  # last: its presence marks a finished artifact
    return meta


# ---------------------------------------------------------------- accuracy gate

def accuracy_drops(task: tasks.Task, fp32: dict, int8: dict) -> dict[str, float]:
    """Points (percentage points) int8 is behind fp32, per task metric."""
    scale = 1.0 if task.is_qa else 100.0  # GLUE metrics are fractions, SQuAD percentages
    drops = {}
    for name, value in fp32.items():
        if name.removesuffix("_mm") in task.metrics and name in int8:
            drops[name] = (value - int8[name]) * scale
    return drops


def check_accuracy_gate(task: tasks.Task, fp32: dict, int8: dict, max_drop: float) -> None:
    """UserError naming both numbers of every metric int8 loses more than `max_drop` points on."""
    scale = 1.0 if task.is_qa else 100.0
    failed = [f"{name} int8 {int8[name] * scale:.2f} vs fp32 {fp32[name] * scale:.2f} (-{drop:.2f} points)"
              for name, drop in accuracy_drops(task, fp32, int8).items() if drop > max_drop]
    if failed:
        raise UserError(f"INT8 accuracy gate: {'; '.join(failed)}, more than "
                        f"quantization.max_accuracy_drop {max_drop:g} point(s); "
                        "try more quantization.calibration_samples or raise the limit")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="quantize configuration JSON (task, quantization)")
    parser.add_argument("--model", required=True, help="fine-tuned save_pretrained folder")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--out", required=True, help="INT8 artifact folder to write")
    args = parser.parse_args(argv)
    config = json.loads(Path(args.config).read_text())
    settings = config["quantization"]
    meta = quantize(args.model, args.data, args.out, config["task"], settings["calibration_samples"],
                    settings.get("stack", "openvino"))
    print("quantize: " + json.dumps(meta), file=sys.stderr)


if __name__ == "__main__":
    run_cli(main)
