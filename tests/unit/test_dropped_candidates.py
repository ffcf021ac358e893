"""A model the OpenVINO stack cannot take leaves a marker saying why
(convert.json / quantize.json), and the later stages read it as "this
candidate drops out", not as a failure."""

from __future__ import annotations

from workflow.scripts.infer import artifacts, convert, stacks
from workflow.scripts.infer.quantize import skip


def test_a_model_openvino_cannot_convert_leaves_one_line_why(tmp_path, capsys):
    err = RuntimeError("Exception from src/frontends/pytorch: aten::cat\n  40 more lines of traceback")
    reason = stacks.unconvertible("gpt2", err)
    assert reason == ("OpenVINO cannot convert gpt2 (RuntimeError: Exception from src/frontends/pytorch: aten::cat); "
                      "int8 and fp32 OpenVINO drop out of the deploy candidates")
    assert "aten::cat" in capsys.readouterr().err  # the whole traceback goes to the rule's log
    meta = convert.not_converted(tmp_path / "model_openvino", reason)
    assert meta["converted"] is False and artifacts.why_not_converted(tmp_path / "model_openvino") == reason
    assert sorted(p.name for p in (tmp_path / "model_openvino").iterdir()) == [convert.META_FILE]


def test_a_converted_model_is_not_dropped(tmp_path):
    (tmp_path / convert.META_FILE).write_text('{"stack": "openvino", "converted": true}')
    assert artifacts.why_not_converted(tmp_path) is None
    (tmp_path / convert.META_FILE).write_text('{"stack": "openvino"}')  # written before the marker existed
    assert artifacts.why_not_converted(tmp_path) is None


def test_int8_that_cannot_be_made_is_a_skip_record(tmp_path):
    reason = stacks.unconvertible("qwen2", ValueError("unsupported op"), "quantize")
    assert reason.endswith("int8 drops out of the deploy candidates") and "qwen2" in reason
    skip(tmp_path / "model_int8", {"quantize": False, "reason": reason})
    assert artifacts.is_quantized(tmp_path / "model_int8") is False
