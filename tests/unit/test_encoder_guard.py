"""No forward is replaced: the packed encoder holds no transformers module
and replaces nothing, and guard.replaced_forwards finds a forward set on a
live object (what train/speed.py's levers did before issue 44) and a class patched
after import. tests/integration/test_model_code.py applies it to the model
as state.build returns it, on both paths."""

from __future__ import annotations

import types

from helpers.tiny_family import tiny_hf
from workflow.scripts.train import encoder, master
from workflow.scripts.train.encoder.guard import replaced_forwards


def test_our_model_replaces_no_forward_and_holds_no_transformers_module():
    model, _ = encoder.build(tiny_hf("Roberta", "classification"), "classification")
    master.to_bf16_encoder(model)  # as bf16_master builds it: a hook, not a replacement
    assert replaced_forwards(model) == []
    assert not [m for m in model.modules() if type(m).__module__.startswith("transformers")]


def test_a_transformers_model_as_built_replaces_nothing():
    assert replaced_forwards(tiny_hf("Bert", "classification")) == []
    assert replaced_forwards(tiny_hf("DistilBert", "qa")) == []


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


def pooled_as_it_is(self, hidden_states):
    return hidden_states[:, 0]
