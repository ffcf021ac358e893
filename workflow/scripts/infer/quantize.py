"""Static INT8 quantization step: calibrate, quantize, save, reload, verify.

The fp32 OpenVINO IR of the convert_openvino step (the fine-tuned model
converted once, for both) is quantized by NNCF: activation ranges come from N training samples, every
Linear layer gets INT8 weights (per channel) and INT8 activations (per
tensor), and the result is saved as OpenVINO IR (`openvino_model.xml/.bin`,
the layout optimum-intel also reads) beside the tokenizer and config.json.
docs/performance.md, Inference and INT8 has the measurements behind this choice.

The step then loads the artifact back from disk and requires its outputs on
the evaluation set to equal the in-memory quantized model's, and checks that
the CPU plugin really runs every Linear layer in INT8. `quantize.json`,
written last, records the stack, versions, calibration and the checks.

Where OpenVINO could not convert the model, int8 drops out with the same
reason. `stack: ipex` quantizes the fine-tuned PyTorch model with Intel
Extension for PyTorch instead (TorchScript artifact), when it is installed
with the torch it pairs with.

Whether to quantize at all is decided here, on the CPU that runs the
inference rules (policy.quantize_decision): quantization.enabled auto
quantizes only where the CPU has int8 dot-product instructions (VNNI or
AMX); elsewhere the folder holds just `quantize.json` saying why not.

The work itself is in int8.py, and the stacks (convert, quantize, compile,
load) in stacks.py; both are imported only when a model is quantized, so
that the step that decides not to (auto on a CPU without VNNI or AMX)
starts in about a second rather than the five that torch costs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from workflow.scripts.settings import step

from workflow.scripts.probes import hardware
from workflow.scripts.common.atomic import atomic_dir, read_json, write_json
from workflow.scripts.settings.views import QuantizeView
from workflow.scripts.infer import artifacts, policy


def skip(out_dir, decision: dict) -> dict:
    """The folder of a run that is not quantized: only quantize.json, saying why."""
    meta = {"quantized": False, "decision": decision}
    with atomic_dir(out_dir) as tmp:
        write_json(tmp / artifacts.META_FILE, meta)
    return meta


def main(argv=None) -> None:
    parser = step.parser(__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="fine-tuned save_pretrained folder")
    parser.add_argument("--openvino", help="the convert_openvino step's fp32 IR folder, quantized as it is")
    parser.add_argument("--data", required=True, help="tokenized DatasetDict folder")
    parser.add_argument("--out", required=True, help="INT8 artifact folder to write")
    args = parser.parse_args(argv)
    config = step.read_view(args, QuantizeView)
    settings = config.quantization
    cpu = hardware.cpu_summary()
    decision = {**policy.quantize_decision(settings.enabled, hardware.low_precision_support(cpu["isa_flags"])),
                "cpu": hardware.cpu_tag(cpu)}
    print(f"quantize: {decision['reason']} {decision['cpu']}", file=sys.stderr)
    not_converted = args.openvino and settings.stack == "openvino" and artifacts.why_not_converted(args.openvino)
    if not_converted:  # the OpenVINO stack has no fp32 IR to start from: int8 drops out with it
        decision = {**decision, "quantize": False, "reason": not_converted}
    if not decision["quantize"]:
        skip(args.out, decision)
        return
    from workflow.scripts.infer import int8, stacks  # torch, transformers, OpenVINO: only to quantize

    try:
        meta = int8.quantize(args.model, args.data, args.out, config.task, settings.calibration_samples,
                             settings.stack, decision=decision, openvino_dir=args.openvino)
    except Exception as err:  # an architecture the OpenVINO stack cannot take: int8 drops out, the run goes on
        if settings.stack == "ipex":
            raise
        reason = stacks.unconvertible(read_json(Path(args.model) / "config.json").get("model_type"), err, "quantize")
        meta = skip(args.out, {**decision, "quantize": False, "reason": reason})
    print("quantize: " + json.dumps(meta), file=sys.stderr)
    if not meta["quantized"]:
        print(f"quantize: not quantized: {meta['decision']['reason']}")


if __name__ == "__main__":
    step.entry(main)
