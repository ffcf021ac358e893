"""No forward is replaced: the packed encoder holds no transformers module
and replaces nothing, and guard.replaced_forwards finds a forward set on a
live object (what train/speed.py's levers did before issue 44), a class patched
after import (bare or through functools.wraps) and a class swapped for a
subclass; transformers' own decorated forwards pass. tests/unit/test_model_code.py
applies it to the model as state.build returns it, on both paths."""

from __future__ import annotations

import functools
import types

import pytest

from helpers.tiny_family import HEADS, KINDS, tiny_hf
from workflow.scripts.train import encoder, master
from workflow.scripts.train.encoder.guard import replaced_forwards


@pytest.mark.parametrize("task", HEADS)
@pytest.mark.parametrize("kind", KINDS)
def test_our_model_replaces_no_forward_and_holds_no_transformers_module(kind, task):
    hf = tiny_hf(kind, task)
    model, _ = encoder.build(hf, task)
    master.to_bf16_encoder(model)  # as bf16_master builds it: a hook, not a replacement
    assert replaced_forwards(model) == []
    assert not [m for m in model.modules() if type(m).__module__.startswith("transformers")]
    assert replaced_forwards(hf) == []  # building ours left the transformers model as it was


@pytest.mark.parametrize("name, settings", [
    ("DebertaV2Config", {"max_position_embeddings": 64}),
    ("ModernBertConfig", {"max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                          "cls_token_id": 1, "sep_token_id": 2}),  # rotary embeddings under torch.no_grad()
    ("Qwen2Config", {"num_key_value_heads": 1, "max_position_embeddings": 64, "bos_token_id": 1, "eos_token_id": 2}),
])
def test_a_model_outside_the_family_as_transformers_builds_it_replaces_nothing(name, settings):
    import transformers

    config = getattr(transformers, name)(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=64, **settings)
    assert replaced_forwards(transformers.AutoModelForSequenceClassification.from_config(config)) == []


def test_a_forward_set_on_a_live_object_is_found():
    hf = tiny_hf("Bert", "classification")
    layer = hf.bert.encoder.layer[2]
    layer.forward = types.MethodType(lambda self, *args, **kwargs: None, layer)  # what the old levers did
    assert replaced_forwards(hf) == ["bert.encoder.layer.2 (BertLayer): forward set on the object"]


def test_a_class_patched_after_import_is_found(monkeypatch):
    from transformers.models.bert import modeling_bert

    hf = tiny_hf("Bert", "classification")
    monkeypatch.setattr(modeling_bert.BertPooler, "forward", pooled_as_it_is)
    assert replaced_forwards(hf) == [f"bert.pooler (BertPooler): BertPooler.forward is {__name__}.pooled_as_it_is"]


def test_a_class_patched_through_functools_wraps_is_found(monkeypatch):
    """wraps copies the original's name and module onto the patch: where its code lives gives it away."""
    from transformers.models.bert import modeling_bert

    hf = tiny_hf("Bert", "classification")
    original = modeling_bert.BertPooler.forward

    @functools.wraps(original)
    def wrapped(self, hidden_states):
        return original(self, hidden_states)

    monkeypatch.setattr(modeling_bert.BertPooler, "forward", wrapped)
    found = f"bert.pooler (BertPooler): BertPooler.forward is wrapped by wrapped of {__file__}"
    assert replaced_forwards(hf) == [found]


def test_an_object_given_a_subclass_of_its_class_is_found():
    from transformers.models.bert import modeling_bert

    class Pooler(modeling_bert.BertPooler):
        forward = pooled_as_it_is

    hf = tiny_hf("Bert", "classification")
    hf.bert.pooler.__class__ = Pooler
    assert replaced_forwards(hf) == [
        f"bert.pooler (Pooler): class {__name__}.{Pooler.__qualname__} subclasses transformers' BertPooler"]


def pooled_as_it_is(self, hidden_states):
    return hidden_states[:, 0]
