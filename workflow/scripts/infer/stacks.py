"""The two INT8 stacks: OpenVINO + NNCF (IR artifact) and IPEX (TorchScript).

Conversion, quantization and compilation per stack, the check that the CPU
plugin runs every Linear layer in INT8, and `CallableModel`, which makes
any artifact (fp32 or int8 IR, TorchScript) callable like a Hugging Face
model. `load_quantized` reads an artifact written by quantize.py back from
disk, `load_ir` any OpenVINO IR folder (dynamic or bucketed shapes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from workflow.scripts.probes import hardware, intel
from workflow.scripts.common.errors import UserError
from workflow.scripts.infer.artifacts import IR_FILE, TORCHSCRIPT_FILE, read_meta
from workflow.scripts.infer.shapes import BucketedRunner

# OpenVINO CPU layer types of Linear layers, and the precisions that mean INT8.
LINEAR_LAYER_TYPES = ("FullyConnected",)
INT8_PRECISIONS = ("u8", "i8")


class CallableModel:
    """An artifact called like a HF model: model(**batch).logits
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

    if getattr(model.config, "use_cache", None):  # decoders (GPT-2, Qwen2, Llama): no key/value cache in the graph
        model.config.use_cache = False
    inputs = [(name, ov.PartialShape([-1, -1]), ov.Type.i64) for name in example]
    with torch.no_grad():
        converted = ov.convert_model(_TupleOutputs(model.eval(), outputs), example_input=dict(example),
                                     input=inputs)
    for port, name in zip(converted.outputs, outputs):
        port.get_tensor().set_names({name})
    return converted


def unconvertible(kind: str | None, err: Exception, doing: str = "convert") -> str:
    """One line: why the OpenVINO stack could not take this architecture (the traceback goes to the rule's log)."""
    import traceback

    traceback.print_exception(err)
    first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return (f"OpenVINO cannot {doing} {kind or 'this model'} ({type(err).__name__}: {first[:200]}); "
            f"{'int8 drops' if doing == 'quantize' else 'int8 and fp32 OpenVINO drop'} out of the deploy candidates")


def quantize_openvino(model, calibration: list[dict], outputs: tuple[str, ...]):
    """The PyTorch model converted, then quantized (quantize_ir)."""
    return quantize_ir(to_openvino(model, calibration[0], outputs), calibration)


def quantize_ir(ov_model, calibration: list[dict]):
    """NNCF post-training static quantization (transformer preset, SmoothQuant)
    of an fp32 OpenVINO model."""
    import nncf

    names = [port.get_any_name() for port in ov_model.inputs]
    dataset = nncf.Dataset([{k: batch[k].numpy() for k in names} for batch in calibration])
    return nncf.quantize(ov_model, dataset, model_type=nncf.ModelType.TRANSFORMER,
                         subset_size=len(calibration))


def read_ir(model_dir):
    """The fp32 OpenVINO model of an IR folder (convert.py's), not compiled."""
    import openvino as ov

    return ov.Core().read_model(Path(model_dir) / IR_FILE)


def compile_openvino(ov_model, threads: int | None = None):
    """Compiled for this CPU: fp32 for the non-quantized ops (never bf16 by
    default on AMX machines), one stream using `threads` cores."""
    import openvino as ov

    threads = threads or hardware.usable_cores(hardware.cpu_summary())
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
              "INFERENCE_PRECISION_HINT": "f32"}
    return ov.Core().compile_model(ov_model, "CPU", config)


def read_openvino(path, threads: int | None = None):
    """An OpenVINO IR file read back from disk and compiled."""
    import openvino as ov

    return compile_openvino(ov.Core().read_model(path), threads)


def save_openvino(ov_model, path) -> None:
    """The quantized model as OpenVINO IR (.xml + .bin), weights kept as they are."""
    import openvino as ov

    ov.save_model(ov_model, path, compress_to_fp16=False)


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


def _openvino_runner(compiled, outputs):
    request = compiled.create_infer_request()

    def run(feed: dict) -> dict:
        result = request.infer({k: v.numpy() for k, v in feed.items()})
        return {name: torch.from_numpy(np.array(result[name])) for name in outputs}
    return run


def wrap_openvino(compiled, outputs) -> CallableModel:
    inputs = tuple(port.get_any_name() for port in compiled.inputs)
    return CallableModel(_openvino_runner(compiled, outputs), tuple(outputs), inputs)


# ---------------------------------------------------------------- IPEX

def _require_ipex():
    """The IPEX module, or UserError naming what to install (before importing it)."""
    found = intel.installed_versions()
    if not found[intel.IPEX_MODULE]:
        raise UserError(f"quantization.stack ipex needs {intel.IPEX_PACKAGE}, which is not installed: "
                        f"pip install torch==2.8.0 {intel.IPEX_PACKAGE}=={intel.IPEX_LAST} "
                        "(see docs/intel-stack.md, Version pairing), "
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


def wrap_torchscript(module, outputs, inputs) -> CallableModel:
    def run(feed: dict) -> dict:
        with torch.no_grad():
            result = module(**feed)
        return dict(zip(outputs, result if isinstance(result, (tuple, list)) else (result,)))
    return CallableModel(run, tuple(outputs), tuple(inputs))


# ---------------------------------------------------------------- artifact

def load_ir(model_dir, outputs, shapes: str = "dynamic", buckets=None, pad_id: int = 0,
            threads: int | None = None) -> CallableModel:
    """An OpenVINO IR folder ready to call, with dynamic or bucketed shapes (shapes.py)."""
    ov_model = read_ir(model_dir)
    if shapes == "dynamic":
        return wrap_openvino(compile_openvino(ov_model, threads), outputs)
    runner = BucketedRunner(ov_model, outputs, buckets, pad_id, lambda m: compile_openvino(m, threads))
    return CallableModel(runner, tuple(outputs), runner.inputs)


def load_quantized(model_dir, threads: int | None = None, shapes: str = "dynamic", buckets=None,
                   pad_id: int = 0) -> CallableModel:
    """The saved INT8 model of `model_dir` (made by quantize.py), ready to call."""
    meta = read_meta(model_dir)
    if not meta.get("quantized", True):
        raise UserError(f"{model_dir} holds no INT8 model: {meta['decision']['reason']}")
    if meta["stack"] == "ipex":
        _require_ipex()
        module = torch.jit.load(str(Path(model_dir) / TORCHSCRIPT_FILE))
        return wrap_torchscript(module, meta["outputs"], meta["inputs"])
    return load_ir(model_dir, meta["outputs"], shapes, buckets, pad_id, threads)
