"""What an inference artifact folder holds, read without torch or OpenVINO:
its file names, the metadata file its step writes last, and the task's
output names. Steps that only read or copy artifacts (deploy_model, the
quantize step when it decides not to quantize or has no fp32 IR) import this rather than
stacks.py, so that they start in about a second rather than the five that
importing torch costs; stacks.py builds and loads the artifacts themselves.
"""

from __future__ import annotations

from pathlib import Path

from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import UserError

IR_FILE = "openvino_model.xml"
TORCHSCRIPT_FILE = "model_int8.pt"
META_FILE = "quantize.json"
CONVERT_META_FILE = "convert.json"  # the fp32 IR folder's (convert.py)


def output_names(task) -> tuple[str, ...]:
    """The outputs of a task's model (tasks.Task): logits, or the two QA logits."""
    return ("start_logits", "end_logits") if task.is_qa else ("logits",)


def read_meta(model_dir, meta_file: str = META_FILE, rule: str = "quantize_static",
              what: str = "INT8 artifact") -> dict:
    """The metadata file an artifact step writes last (its presence marks a finished artifact)."""
    path = Path(model_dir) / meta_file
    if not path.is_file():
        raise UserError(f"{model_dir} is not a finished {what} (no {meta_file}); rerun {rule}")
    return read_json(path)


def is_quantized(model_dir) -> bool:
    """False for the folder quantize_static leaves where it decided not to quantize."""
    return bool(read_meta(model_dir).get("quantized", True))


def why_not_converted(model_dir) -> str | None:
    """Why the fp32 OpenVINO folder `model_dir` (convert_openvino's) holds no
    model, or None when it holds one."""
    meta = read_meta(model_dir, CONVERT_META_FILE, "convert_openvino", "OpenVINO fp32 model")
    return None if meta.get("converted", True) else meta["reason"]
