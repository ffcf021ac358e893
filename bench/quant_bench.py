"""fp32 against static INT8 with every quantization stack, side by side.

    .venv/bin/python bench/quant_bench.py            # after `make demo`

Quantizes the fine-tuned demo model (results/demo/default/model) with each
stack that is installed, calibrating on the same N training samples, then
measures all candidates in interleaved rounds in ONE process (a shared
machine slows them alike): accuracy and F1 on the validation split,
throughput at the evaluation batch size (length-sorted batches, as
workflow/scripts/infer/runtime.py) and latency at batch size 1 (p50, p99).
Ratios are against the workflow's fp32 evaluation (eager PyTorch). The last
lines check the targets of README, Quantization for the workflow's stack.

Stacks not installed are listed as skipped; the extra ones install with
`pip install onnxruntime onnx onnxscript torchao` (not needed by the workflow).
Classification tasks only.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import time
from pathlib import Path

import datasets
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workflow.scripts.common import hardware, tasks
from workflow.scripts.infer import metrics, quantize, runtime, stacks
from workflow.scripts.train.batching import pad_collate

BASELINE = "torch fp32 (workflow fp32)"
TARGET_SPEEDUP = 1.5
TARGET_POINTS = 1.0


class Logits:
    """Anything returning logits for (input_ids, attention_mask, token_type_ids) as a HF-like model."""

    def __init__(self, run, inputs):
        self.run, self.inputs = run, inputs

    def __call__(self, **batch):
        from transformers.modeling_outputs import SequenceClassifierOutput

        return SequenceClassifierOutput(logits=self.run(*(batch[k] for k in self.inputs)))


# ---------------------------------------------------------------- candidates

def torch_dynamic(model, calibration, work):
    from torch.ao.quantization import quantize_dynamic

    return {"torch dynamic int8 (Linear)": quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)}


def torch_eager_static(model, calibration, work):
    """PyTorch eager-mode static quantization: every Linear between Quant/DeQuant stubs."""
    import torch.ao.quantization as tq

    class Quantized(torch.nn.Module):
        def __init__(self, linear):
            super().__init__()
            self.quant, self.linear, self.dequant = tq.QuantStub(), linear, tq.DeQuantStub()

        def forward(self, x):
            return self.dequant(self.linear(self.quant(x)))

    torch.backends.quantized.engine = "x86"
    qmodel = copy.deepcopy(model)
    for module in list(qmodel.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                wrapped = Quantized(child)
                wrapped.qconfig = tq.QConfig(
                    activation=tq.MinMaxObserver.with_args(dtype=torch.quint8, reduce_range=False),
                    weight=tq.PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
                                                                 qscheme=torch.per_channel_symmetric))
                setattr(module, name, wrapped)
    tq.prepare(qmodel, inplace=True)
    with torch.no_grad():
        for batch in calibration:
            qmodel(**batch)
    return {"torch eager static int8": tq.convert(qmodel, inplace=True)}


class _Positional(torch.nn.Module):
    def __init__(self, model, inputs):
        super().__init__()
        self.model, self.inputs = model, inputs

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        given = dict(zip(self.inputs, (input_ids, attention_mask, token_type_ids)))
        return self.model(**given).logits


def torchao_pt2e(model, calibration, work):
    """torch.export + torchao PT2E with the X86 Inductor quantizer, compiled by Inductor."""
    import torch._inductor.config as inductor_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    inductor_config.freezing = True
    inputs = tuple(calibration[0])
    example = pad_collate(0)([{k: v[0].tolist() for k, v in b.items()} for b in calibration[:8]])
    batch, length = (torch.export.Dim("batch", min=1, max=1024),
                     torch.export.Dim("length", min=2, max=model.config.max_position_embeddings))
    shapes = tuple({0: batch, 1: length} for _ in inputs)
    args = tuple(example[k] for k in inputs)
    program = torch.export.export(_Positional(model, inputs), args, dynamic_shapes=shapes)
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(program.module(), quantizer)
    with torch.no_grad():
        for b in calibration:
            prepared(*(b[k] for k in inputs))
    converted = convert_pt2e(prepared)
    path = work / "pt2e_int8.pt2"
    torch.export.save(torch.export.export(converted, args, dynamic_shapes=shapes), path)
    reloaded = torch.export.load(path).module()
    compiled_fp32 = torch.compile(_Positional(model, inputs), dynamic=True)
    compiled_int8 = torch.compile(reloaded, dynamic=True)
    return {"torch.compile fp32 (Inductor)": Logits(compiled_fp32, inputs),
            "torchao PT2E x86 int8 (Inductor)": Logits(compiled_int8, inputs)}


def onnxruntime_static(model, calibration, work):
    """ONNX export, then ORT quantize_static: QDQ, per-channel weights, MinMax, Linear MatMuls."""
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    inputs = tuple(calibration[0])
    fp32_path, int8_path = work / "model.onnx", work / "model_int8.onnx"
    args = tuple(calibration[0][k] for k in inputs)
    torch.onnx.export(_Positional(model, inputs), args, fp32_path, input_names=list(inputs), output_names=["logits"],
                      dynamic_axes={k: {0: "batch", 1: "length"} for k in inputs}, opset_version=17, dynamo=False)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.rows = iter([{k: b[k].numpy() for k in inputs} for b in calibration])

        def get_next(self):
            return next(self.rows, None)

    quantize_static(fp32_path, int8_path, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    reduce_range=False, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=["MatMul", "Gemm"], calibrate_method=CalibrationMethod.MinMax,
                    extra_options={"MatMulConstBOnly": True})

    def session(path):
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = torch.get_num_threads(), 1
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return Logits(lambda *a: torch.from_numpy(sess.run(None, {k: v.numpy() for k, v in zip(inputs, a)})[0]),
                      inputs)

    return {"onnxruntime fp32": session(fp32_path), "onnxruntime static int8 (QDQ)": session(int8_path)}


def openvino_nncf(model, calibration, work):
    """The workflow's stack: stacks.py's own functions (NNCF, OpenVINO IR)."""
    import openvino as ov

    outputs = ("logits",)
    fp32 = stacks.to_openvino(model, calibration[0], outputs)
    int8 = stacks.quantize_openvino(model, calibration, outputs)
    ov.save_model(int8, work / "int8.xml", compress_to_fp16=False)
    reloaded = stacks.compile_openvino(ov.Core().read_model(work / "int8.xml"))
    return {"openvino fp32 (same runtime)": stacks.wrap_openvino(stacks.compile_openvino(fp32), outputs),
            "openvino+nncf static int8 (workflow)": stacks.wrap_openvino(reloaded, outputs)}


STACKS = {
    "torch-dynamic": torch_dynamic,
    "torch-eager-static": torch_eager_static,
    "torchao-pt2e": torchao_pt2e,
    "onnxruntime": onnxruntime_static,
    "openvino": openvino_nncf,
}
WORKFLOW = "openvino+nncf static int8 (workflow)"


# ---------------------------------------------------------------- measuring

def batch1_times(model, rows) -> list[float]:
    """Milliseconds per single-sample call (after a short warm-up)."""
    times = []
    with torch.inference_mode():
        for i, row in enumerate(rows[:3] + rows):
            start = time.perf_counter()
            model(**row)
            if i >= 3:
                times.append(1000 * (time.perf_counter() - start))
    return times


def measure(candidates: dict, split, labels, task, rounds: int, batch_size: int, latency_rows: int) -> dict:
    """A warm-up pass, then interleaved rounds: every candidate once per round."""
    collate = pad_collate(0)
    inputs = split.select_columns([k for k in runtime.MODEL_INPUTS if k in split.column_names])
    rows = [collate([inputs[i]]) for i in range(min(latency_rows, len(split)))]
    stats = {name: {"sps": [], "ms": []} for name in candidates}
    for model in candidates.values():  # warm-up, unmeasured: compilers see every shape once
        runtime.forward_all(model, split, batch_size, 0, contextlib.nullcontext)
        batch1_times(model, rows)
    for r in range(rounds):
        for name, model in candidates.items():
            outputs, seconds = runtime.forward_all(model, split, batch_size, 0, contextlib.nullcontext)
            stats[name]["sps"].append(len(split) / seconds)
            stats[name]["ms"] += batch1_times(model, rows)
            if r == 0:
                logits = np.stack(outputs)
                stats[name]["metrics"] = metrics.glue_metrics(task.name, logits.argmax(-1), labels)
            print(f"  round {r + 1}/{rounds} {name}: {stats[name]['sps'][-1]:.1f} samples/s", file=sys.stderr)
    return stats


def table(stats: dict) -> list[dict]:
    base = stats[BASELINE]
    base_sps = float(np.median(base["sps"]))
    rows = []
    for name, s in stats.items():
        sps = float(np.median(s["sps"]))
        p50, p99 = np.percentile(s["ms"], [50, 99])
        rows.append({"stack": name, "accuracy": s["metrics"]["accuracy"], "f1": s["metrics"]["f1"],
                     "samples_per_second": round(sps, 2), "speedup": round(sps / base_sps, 2),
                     "latency_ms_p50": round(float(p50), 2), "latency_ms_p99": round(float(p99), 2),
                     "latency_speedup_p50": round(float(np.percentile(base["ms"], 50) / p50), 2),
                     "d_accuracy_points": round(100 * (s["metrics"]["accuracy"] - base["metrics"]["accuracy"]), 2),
                     "d_f1_points": round(100 * (s["metrics"]["f1"] - base["metrics"]["f1"]), 2)})
    return rows


def print_table(rows: list[dict], skipped: dict) -> None:
    head = f"{'stack':40} {'acc':>6} {'Δacc':>6} {'F1':>6} {'ΔF1':>6} {'samples/s':>9} {'x fp32':>6} " \
           f"{'p50 ms':>7} {'p99 ms':>7} {'x p50':>5}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['stack']:40} {r['accuracy']:6.4f} {r['d_accuracy_points']:+6.2f} {r['f1']:6.4f} "
              f"{r['d_f1_points']:+6.2f} {r['samples_per_second']:9.1f} {r['speedup']:5.2f}x "
              f"{r['latency_ms_p50']:7.1f} {r['latency_ms_p99']:7.1f} {r['latency_speedup_p50']:4.2f}x")
    for name, why in skipped.items():
        print(f"{name:40} skipped: {why}")


def check_targets(rows: list[dict]) -> bool:
    chosen = next((r for r in rows if r["stack"] == WORKFLOW), None)
    if chosen is None:
        print("targets: the workflow's stack (openvino) was not measured")
        return False
    accurate = min(chosen["d_accuracy_points"], chosen["d_f1_points"]) >= -TARGET_POINTS
    fast = chosen["speedup"] >= TARGET_SPEEDUP
    print(f"target accuracy/F1 within {TARGET_POINTS:g} point of fp32: "
          f"{'PASS' if accurate else 'FAIL'} ({chosen['d_accuracy_points']:+.2f} / {chosen['d_f1_points']:+.2f})")
    print(f"target throughput >= {TARGET_SPEEDUP}x fp32: {'PASS' if fast else 'FAIL'} ({chosen['speedup']:.2f}x)")
    return accurate and fast


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="results/demo/default/model")
    parser.add_argument("--data", default="results/demo/data/tokenized")
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--calibration-samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="throughput batch (evaluation.batch_size)")
    parser.add_argument("--latency-rows", type=int, default=100)
    parser.add_argument("--stacks", default=",".join(STACKS), help=f"comma list of {', '.join(STACKS)}")
    parser.add_argument("--work", default="results/quant_bench", help="folder for the artifacts")
    parser.add_argument("--json", help="also write the table here")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    datasets.disable_progress_bars()
    task = tasks.get_task(args.task)
    threads = hardware.usable_cores(hardware.cpu_summary())
    torch.set_num_threads(threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tokenized = datasets.load_from_disk(args.data)
    pad_id = AutoTokenizer.from_pretrained(args.model).pad_token_id
    rows = quantize.calibration_rows(tokenized["train"], args.calibration_samples)
    calibration = quantize.calibration_batches(rows, pad_id)
    model = runtime.load_for_eval(args.model, task)
    candidates, skipped = {BASELINE: model}, {}
    for name in args.stacks.split(","):
        start = time.perf_counter()
        try:
            built = STACKS[name](model, calibration, work)
        except ImportError as err:
            skipped[name] = f"not installed ({err.name})"
            continue
        candidates.update(built)
        print(f"built {name} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    split = tokenized[task.validation_splits[0]]
    print(f"measuring {len(candidates)} candidates, {args.rounds} interleaved rounds, {threads} threads, "
          f"{len(split)} rows at batch {args.batch_size}, {args.latency_rows} rows at batch 1", file=sys.stderr)
    stats = measure(candidates, split, np.array(split["labels"]), task, args.rounds, args.batch_size,
                    args.latency_rows)
    result = table(stats)
    print_table(result, skipped)
    ok = check_targets(result)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": result, "skipped": skipped, "threads": threads}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
