"""Any sequence-classification architecture: BERT, RoBERTa, DistilBERT and
DeBERTa-v2, each built tiny from a config (MiniLM's tokenizer, as the real
RoBERTa and DistilBERT tokenizers without token_type_ids), trains, saves,
evaluates and quantizes through the stages' own entry points."""

from __future__ import annotations

import json

import pytest

from helpers.native_files import write_native
from helpers.ranks import single_rank
from workflow.scripts.settings import config as cfg
from workflow.scripts.data import load as data, tokenize as tokenize_data
from workflow.scripts.infer import evaluate, quantize, stacks
from workflow.scripts.nodes import describe as environment
from workflow.scripts.train import rank as train

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
ARCHITECTURES = {
    "bert": ("BertConfig", SMALL, True),
    "roberta": ("RobertaConfig", {**SMALL, "max_position_embeddings": 130, "type_vocab_size": 1,
                                  "pad_token_id": 0}, False),
    "distilbert": ("DistilBertConfig", {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}, False),
    "deberta-v2": ("DebertaV2Config", {**SMALL, "max_position_embeddings": 128}, True),
}


def tiny(kind: str, out, minilm_dir):
    import torch
    import transformers

    name, settings, token_types = ARCHITECTURES[kind]
    config = getattr(transformers, name)(vocab_size=30522, **settings)
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(out)
    inputs = ["input_ids", "token_type_ids", "attention_mask"] if token_types else ["input_ids", "attention_mask"]
    transformers.AutoTokenizer.from_pretrained(minilm_dir, model_input_names=inputs).save_pretrained(out)
    return out


@pytest.mark.parametrize("kind", list(ARCHITECTURES))
def test_architecture_trains_saves_evaluates_and_quantizes(kind, tmp_path, minilm_dir, monkeypatch):
    single_rank(monkeypatch)
    model = tiny(kind, tmp_path / kind, minilm_dir)
    config = cfg.validate({
        "experiment": kind, "task": "mrpc", "model": str(model), "data": write_native("mrpc", tmp_path / "files"),
        "train": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3, "precision": "fp32", "max_seq_length": 64,
                  "checkpoint_every": 0},
        "distributed": {"processes_per_node": 1, "threads_per_process": 1}, "evaluation": {"batch_size": 8},
        "quantization": {"enabled": True, "calibration_samples": 16, "stack": "openvino"}})
    conf = tmp_path / "config.json"
    conf.write_text(json.dumps(config))
    info = tmp_path / "environment.json"
    info.write_text(json.dumps(environment.describe(config, launcher=False)))
    data.main(["--config", str(conf), "--out", str(tmp_path / "raw")])
    tokenize_data.main(["--config", str(conf), "--data", str(tmp_path / "raw"), "--out", str(tmp_path / "tok")])
    train.main(["--config", str(conf), "--environment", str(info), "--data", str(tmp_path / "tok"),
                "--out", str(tmp_path / "run"), "--log-dir", str(tmp_path / "logs")])
    saved = json.loads((tmp_path / "run/model/config.json").read_text())
    assert saved["model_type"] == kind and saved["id2label"] == {"0": "not_equivalent", "1": "equivalent"}
    evaluate.main(["--config", str(conf), "--environment", str(info), "--model", str(tmp_path / "run/model"),
                   "--data", str(tmp_path / "tok"), "--raw", str(tmp_path / "raw"),
                   "--out", str(tmp_path / "eval.json")])
    assert 0 <= json.loads((tmp_path / "eval.json").read_text())["accuracy"] <= 1
    quantize.main(["--config", str(conf), "--model", str(tmp_path / "run/model"), "--data", str(tmp_path / "tok"),
                   "--out", str(tmp_path / "int8")])
    int8 = stacks.load_quantized(tmp_path / "int8")  # a real int8 model, not a skip record
    assert int8 is not None and len(list((tmp_path / "int8").iterdir())) > 1
