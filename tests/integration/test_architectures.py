"""Any sequence-classification architecture finishes a whole workflow run
with quantization on: BERT, RoBERTa, DeBERTa-v2, ModernBERT, DistilBERT
and the decoders GPT-2 and Qwen2, each built tiny from a config (MiniLM's
tokenizer; as the real RoBERTa and DistilBERT tokenizers, without
token_type_ids; the decoders' without a pad token), in one sweep. BERT's
whole run with quantization on is test_quantize.py's (the same tiny BERT):
it is not run twice."""

from __future__ import annotations

import json

import pytest
import yaml
from huggingface_hub import ModelCard

from helpers.workflow import snakemake, tiny_experiment, write_config
from workflow.scripts.infer import policy

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
FAMILIES = ("roberta", "deberta-v2", "modernbert", "distilbert", "gpt2", "qwen2")


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


@pytest.mark.timeout(2400)  # six runs of every stage: minutes on a quiet machine, more on a shared one
def test_every_family_finishes_its_run(tmp_path, minilm_dir):
    """One workflow, a sweep over tiny models of every family, quantization on: every run trains,
    saves a model transformers loads with the task's labels, evaluates, quantizes and ends with
    summary.json and deploy/; a decoder either deploys through OpenVINO or drops it with a reason."""
    models = [str(tiny(kind, tmp_path / "models" / kind, minilm_dir)) for kind in FAMILIES]
    configfile = tiny_experiment(tmp_path, models[0], epochs=1, batch_size=16, checkpoint_every=0)
    config = yaml.safe_load(configfile.read_text())
    write_config(configfile, {**config, "sweep": {"model": models}, "evaluation": {"batch_size": 16},
                              "distributed": {"processes_per_node": 1, "threads_per_process": 1},
                              "quantization": {"enabled": True, "calibration_samples": 8, "max_accuracy_drop": 100}})
    snakemake(tmp_path, configfile, timeout=2400)
    runs = {r["run"]: r for r in json.loads((tmp_path / "results/tiny/summary.json").read_text())["runs"]}
    assert set(runs) == set(FAMILIES)
    for kind in FAMILIES:
        saved = json.loads((tmp_path / f"results/tiny/{kind}/model/config.json").read_text())
        assert saved["model_type"] == kind and saved["id2label"] == {"0": "not_equivalent", "1": "equivalent"}
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
