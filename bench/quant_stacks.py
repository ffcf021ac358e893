"""The other quantization stacks, for reference beside the workflow's
(bench/quant_bench.py --others ...): PyTorch dynamic and eager static int8,
torchao PT2E through Inductor, ONNX Runtime static int8. Each takes (model,
calibration batches, work folder) and returns {name: model called like a HF
model}. Those not installed are skipped; they install with
`pip install onnxruntime onnx onnxscript torchao` (never needed by the workflow).
Classification models only.
"""

from __future__ import annotations

import copy

import torch

from workflow.scripts.data.batching import pad_collate


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


OTHERS = {
    "torch-dynamic": torch_dynamic,
    "torch-eager-static": torch_eager_static,
    "torchao-pt2e": torchao_pt2e,
    "onnxruntime": onnxruntime_static,
}
