"""The packed encoder loads any transformers checkpoint of the BERT family
(a model or a folder, a base checkpoint under a new head), saves a folder
that transformers loads unchanged with the same numbers, and says in one
line why it does not serve a model outside the family."""

from __future__ import annotations

import pytest
import torch

from helpers.tiny_family import KINDS, batch, tiny_hf
from workflow.scripts.train import encoder


@pytest.mark.parametrize("task", ["classification", "qa"])
@pytest.mark.parametrize("kind", KINDS)
def test_saved_folder_loads_in_transformers_with_the_same_logits(kind, task, tmp_path):
    import transformers

    hf = tiny_hf(kind, task)
    model, _ = encoder.build(hf, task, hash_dropout=False)
    with torch.no_grad():  # trained: other values than the checkpoint's
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.01)
    model.save_pretrained(tmp_path)
    auto = transformers.AutoModelForQuestionAnswering if task == "qa" else \
        transformers.AutoModelForSequenceClassification
    loaded = auto.from_pretrained(tmp_path).eval()
    assert type(loaded) is type(hf)
    inputs = {k: v for k, v in batch([12, 5, 9], 12, task).items() if k in ("input_ids", "attention_mask")}
    ours, theirs = model.eval()(**inputs), loaded(**inputs)
    real = inputs["attention_mask"].bool()
    for name in ("start_logits", "end_logits") if task == "qa" else ("logits",):
        got, want = getattr(ours, name), getattr(theirs, name)
        torch.testing.assert_close(got[real] if task == "qa" else got, want[real] if task == "qa" else want,
                                   atol=1e-5, rtol=1e-4)
    again, _ = encoder.build(tmp_path, task, hash_dropout=False)  # and back, from the folder
    for (name, value), (_, want) in zip(again.state_dict().items(), model.state_dict().items(), strict=True):
        assert torch.equal(value, want), name


def test_a_base_checkpoint_gets_transformers_new_head(tiny_model_dir):
    """A BertModel folder (pooler, no classifier): the pooler is the head's
    dense layer, the classifier starts as transformers starts it."""
    import transformers

    torch.manual_seed(3)
    model, why_not = encoder.build(tiny_model_dir, "classification", num_labels=4, hash_dropout=False)
    assert why_not is None and model.head.out.weight.shape == (4, 32)
    assert model.choices["encoder"] == "cpuddp's packed encoder (bert, BertForSequenceClassification's weights)"
    torch.manual_seed(3)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=4)
    torch.testing.assert_close(model.head.dense.weight, hf.bert.pooler.dense.weight, atol=0, rtol=0)
    torch.testing.assert_close(model.head.out.weight, hf.classifier.weight, atol=0, rtol=0)
    qa, _ = encoder.build(tiny_model_dir, "qa", hash_dropout=False)  # no pooler in BERT's QA model
    assert qa is not None and qa.head.out.weight.shape == (2, 32)


def test_models_outside_the_family_are_named_in_one_line():
    import transformers

    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16)
    model, why_not = encoder.build(transformers.GPT2ForSequenceClassification(config), "classification")
    assert model is None and "gpt2 is not of the BERT family" in why_not and "\n" not in why_not
    model, why_not = encoder.build(tiny_hf("Bert", "qa"), "classification")
    assert model is None and "BertForQuestionAnswering is not a classification head" in why_not


def test_frozen_parameters_stay_frozen():
    hf = tiny_hf("DistilBert", "classification")
    hf.distilbert.embeddings.position_embeddings.weight.requires_grad_(False)  # sinusoidal positions
    model, _ = encoder.build(hf, "classification", hash_dropout=False)
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen == ["encoder.embeddings.position.weight"]


def test_weight_decay_groups_are_transformers():
    """Biases and norms undecayed, as train/state.undecayed_names finds them on transformers' model."""
    from workflow.scripts.train.encoder.weights import names
    from workflow.scripts.train.state import undecayed_names

    hf = tiny_hf("Electra", "classification")
    model, _ = encoder.build(hf, "classification", hash_dropout=False)
    mapping = names(model, hf.base_model_prefix)
    assert {mapping[name] for name in undecayed_names(model)} == undecayed_names(hf)


def _refuse_transformers_loading(monkeypatch):
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("loaded through transformers' model code")

    for auto in (transformers.AutoModelForSequenceClassification, transformers.AutoModelForQuestionAnswering):
        monkeypatch.setattr(auto, "from_pretrained", refuse)


@pytest.mark.parametrize("task", ["classification", "qa"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_saved_folder_is_read_back_without_transformers_model_code(kind, task, tmp_path, monkeypatch):
    """A rank reads the folder's safetensors itself (transformers' model code costs
    about 2 s of its start): every family, prefixed names, the values as saved."""
    model, _ = encoder.build(tiny_hf(kind, task), task, hash_dropout=False)
    model.save_pretrained(tmp_path)
    _refuse_transformers_loading(monkeypatch)
    again, _ = encoder.build(tmp_path, task, hash_dropout=False)
    for (name, value), (_, want) in zip(again.state_dict().items(), model.state_dict().items(), strict=True):
        assert torch.equal(value, want), name
    assert not again.training


def test_folders_the_encoder_does_not_read_go_through_transformers(tiny_model_dir, tmp_path, monkeypatch):
    """A sharded folder, or one whose head has another shape, is transformers' to
    load: it reads the first, and says what is wrong with the second."""
    import shutil

    import transformers

    torch.manual_seed(3)
    sharded = tmp_path / "sharded"
    transformers.AutoModelForSequenceClassification.from_pretrained(tiny_model_dir).save_pretrained(
        sharded, max_shard_size="100KB")
    assert not (sharded / "model.safetensors").exists()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model_dir / name, sharded / name)
    model, _ = encoder.build(sharded, "classification", hash_dropout=False)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(sharded)
    torch.testing.assert_close(model.head.out.weight, hf.classifier.weight, atol=0, rtol=0)
    saved = tmp_path / "two-labels"
    model.save_pretrained(saved)
    with pytest.raises(RuntimeError, match="mismatched_sizes"):  # 2 labels saved, 3 asked for
        encoder.build(saved, "classification", hash_dropout=False, num_labels=3)
    _refuse_transformers_loading(monkeypatch)
    with pytest.raises(AssertionError, match="through transformers"):
        encoder.build(saved, "classification", hash_dropout=False, num_labels=3)
