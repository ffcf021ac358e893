"""Any sequence-classification architecture: BERT, RoBERTa, DistilBERT and
DeBERTa-v2, each built tiny from a config (MiniLM's tokenizer, as the real
RoBERTa and DistilBERT tokenizers without token_type_ids), trains, saves,
evaluates and quantizes through the stages' own entry points; and
ModernBERT and the decoders (GPT-2, Qwen2, with a tokenizer without a pad
token) finish a whole workflow run with quantization on."""

from __future__ import annotations

import json

import pytest
import yaml
from huggingface_hub import ModelCard

from helpers.native_files import write_native
from helpers.workflow import snakemake, tiny_experiment, write_config
from helpers.ranks import single_rank
from workflow.scripts.settings import config as cfg
from workflow.scripts.data import load as data, tokenize as tokenize_data
from workflow.scripts.infer import evaluate, policy, quantize, stacks
from workflow.scripts.nodes import describe as environment
from workflow.scripts.settings.views import EnvironmentView
from workflow.scripts.train import rank as train

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
ARCHITECTURES = {
    "bert": ("BertConfig", SMALL, True),
    "roberta": ("RobertaConfig", {**SMALL, "max_position_embeddings": 130, "type_vocab_size": 1,
                                  "pad_token_id": 0}, False),
    "distilbert": ("DistilBertConfig", {"dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}, False),
    "deberta-v2": ("DebertaV2Config", {**SMALL, "max_position_embeddings": 128}, True),
    "modernbert": ("ModernBertConfig", {**SMALL, "max_position_embeddings": 128, "pad_token_id": 0,
                                        "bos_token_id": 101, "eos_token_id": 102, "cls_token_id": 101,
                                        "sep_token_id": 102}, False),
    # Decoders: their tokenizer has no pad token (DECODER), as GPT-2's and Llama's do not.
    "gpt2": ("GPT2Config", {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 128, "bos_token_id": 101,
                            "eos_token_id": 102}, None),
    "qwen2": ("Qwen2Config", {**SMALL, "num_key_value_heads": 1, "max_position_embeddings": 128,
                              "bos_token_id": 101, "eos_token_id": 102}, None),
}
ENCODERS = ("bert", "roberta", "distilbert", "deberta-v2")
# Through the whole workflow: the families no other workflow test runs (the
# encoders above finish every stage here and BERT runs in every workflow test);
# the decoders are the ones whose OpenVINO export can fail.
FAMILIES = ("modernbert", "gpt2", "qwen2")


def tiny(kind: str, out, minilm_dir):
    import torch
    import transformers

    name, settings, token_types = ARCHITECTURES[kind]
    config = getattr(transformers, name)(vocab_size=30522, **settings)
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(out)
    inputs = ["input_ids", "token_type_ids", "attention_mask"] if token_types else ["input_ids", "attention_mask"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir, model_input_names=inputs)
    if token_types is None:  # a decoder's tokenizer: an eos token, no pad token
        tokenizer.pad_token, tokenizer.eos_token = None, "[SEP]"
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize("kind", ENCODERS)
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
    view = EnvironmentView.pick(config)
    info.write_text(json.dumps(environment.describe(view.distributed, view.train, launcher=False)))
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


@pytest.mark.timeout(1200)  # three runs of every stage: minutes on a quiet machine, more on a shared one
def test_every_family_finishes_its_run(tmp_path, minilm_dir):
    """One workflow, a sweep over tiny models of the other families, quantization on: every run ends
    with summary.json and deploy/; a decoder either deploys through OpenVINO or drops it with a reason."""
    models = [str(tiny(kind, tmp_path / "models" / kind, minilm_dir)) for kind in FAMILIES]
    configfile = tiny_experiment(tmp_path, models[0], epochs=1, batch_size=16, checkpoint_every=0)
    config = yaml.safe_load(configfile.read_text())
    write_config(configfile, {**config, "sweep": {"model": models}, "evaluation": {"batch_size": 16},
                              "distributed": {"processes_per_node": 1, "threads_per_process": 1},
                              "quantization": {"enabled": True, "calibration_samples": 8, "max_accuracy_drop": 100}})
    snakemake(tmp_path, configfile, timeout=1200)
    runs = {r["run"]: r for r in json.loads((tmp_path / "results/tiny/summary.json").read_text())["runs"]}
    assert set(runs) == set(FAMILIES)
    for kind in FAMILIES:
        deployed = json.loads((tmp_path / f"results/tiny/{kind}/deploy" / policy.DEPLOY_FILE).read_text())
        assert deployed["candidate"] == runs[kind]["deploy"]["candidate"], kind
        assert ModelCard.load(tmp_path / f"results/tiny/{kind}/deploy/README.md").data.eval_results, kind
        evals, note = runs[kind]["eval"], runs[kind]["quantization"]["note"]
        if kind in ("gpt2", "qwen2"):  # through OpenVINO, or both OpenVINO candidates left out, saying why
            assert evals["fp32_openvino"] or "OpenVINO cannot convert" in deployed["why"], kind
            assert evals["int8"] or "OpenVINO cannot" in note, kind
        else:
            assert evals["fp32_openvino"] and evals["int8"], kind
    said = [log.read_text() for log in (tmp_path / "logs/data_tokenize").rglob("*.log")]
    assert sum("has no pad token; padding with its eos token '[SEP]'" in text for text in said) == 2, said
