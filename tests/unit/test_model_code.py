"""state.build trains the BERT family through cpuddp's own encoder
(train.model_code auto) and any model through transformers when asked;
on both paths the model it returns has no forward replaced
(encoder/guard.py), the run line says which path and why, and one update
trains through DDP. A single-rank gloo group in this process (no process
is started)."""

from __future__ import annotations

import json
import logging
import shutil

import datasets
import pytest
import torch
import transformers
from transformers import AutoModelForSequenceClassification

from helpers.one_rank import one_rank_group
from workflow.scripts.common.errors import UserError
from workflow.scripts.launch.ranks import DistEnv
from workflow.scripts.settings import levers
from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.settings.views import TrainView
from workflow.scripts.train import encoder, model_code
from workflow.scripts.train.encoder.guard import replaced_forwards
from workflow.scripts.train.encoder.spec import why_not
from workflow.scripts.train.loop import train_step
from workflow.scripts.train.state import build


@pytest.fixture
def data_dir(tmp_path):
    torch.manual_seed(0)
    rows = {"input_ids": [], "attention_mask": [], "token_type_ids": [], "labels": []}
    for i in range(16):
        length = 5 + i % 7
        rows["input_ids"].append([101] + torch.randint(1000, 2000, (length - 2,)).tolist() + [102])
        rows["attention_mask"].append([1] * length)
        rows["token_type_ids"].append([0] * length)
        rows["labels"].append(i % 2)
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "data")
    return str(tmp_path / "data")


@pytest.fixture
def group():
    with one_rank_group():
        yield


def built(model_dir, data_dir, setting: str, precision: str, caplog, trust_remote_code: bool = False):
    cfg = TrainView.of({"task": "mrpc", "model": str(model_dir), "trust_remote_code": trust_remote_code,
                        "train": {"batch_size": 4, "max_steps": 2, "model_code": setting}})
    decisions = RunDecisions("gloo", precision, 1, 1, 1, levers=levers.choose(levers.Levers())[0])
    log = logging.getLogger("test_model_code")
    with caplog.at_level(logging.INFO, logger="test_model_code"):
        state, _ = build(cfg, decisions, data_dir, DistEnv(0, 1, 0, 1, "none"), log)
    return state


@pytest.mark.parametrize("setting, precision, code", [("auto", "bf16_master", "cpuddp"), ("auto", "fp32", "cpuddp"),
                                                      ("transformers", "fp32", "transformers")])
def test_the_model_state_build_returns_replaces_no_forward_and_trains(tiny_model_dir, data_dir, group, caplog,
                                                                      setting, precision, code):
    state = built(tiny_model_dir, data_dir, setting, precision, caplog)
    assert replaced_forwards(state.model) == [] and replaced_forwards(state.ddp_model) == []
    assert isinstance(state.model, encoder.PackedModel) == (code == "cpuddp")
    assert state.choice.code == code
    line = next(r.message for r in caplog.records if r.message.startswith("model code:"))
    assert line.startswith(f"model code: {code} (") and ("auto: the BERT family" in line) == (setting == "auto")
    levers_line = next(r.message for r in caplog.records if r.message.startswith("levers:"))
    assert ("padding built in: packed real tokens" in levers_line) == (code == "cpuddp")
    batch = next(iter(state.loader))  # the encoder's: packed real tokens, no padded layout
    assert ("cu_seqlens" in batch and "attention_mask" not in batch and batch["input_ids"].dim() == 1) \
        == (code == "cpuddp")
    before = {n: p.detach().clone() for n, p in state.model.named_parameters()}
    state.ddp_model.train()
    loss = train_step(state, [batch])
    assert torch.isfinite(torch.as_tensor(loss))
    assert any(not torch.equal(before[n], p) for n, p in state.model.named_parameters())


def test_a_model_outside_the_family_trains_through_transformers_and_says_why():
    import transformers

    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, pad_token_id=0)
    hf = AutoModelForSequenceClassification.from_config(config)
    chosen = levers.choose(levers.Levers())[0]
    model, choice = model_code.build("auto", hf, is_qa=False, ipex=False, levers=chosen)
    assert model is hf and choice.code == "transformers" and choice.why.startswith("auto: model type gpt2")
    with pytest.raises(UserError, match="train.model_code cpuddp: model type gpt2"):
        model_code.build("cpuddp", hf, is_qa=False, ipex=False, levers=chosen)
    model, choice = model_code.build("auto", hf, is_qa=False, ipex=True, levers=chosen)
    assert choice.code == "transformers" and "IPEX" in choice.why


# A model with code of its own (trust_remote_code), declaring model_type bert.
OWN_MODELING = """
from transformers import BertForSequenceClassification


class OwnBertForSequenceClassification(BertForSequenceClassification):
    \"\"\"The model's own code: a class of its own is enough to tell it apart.\"\"\"
"""
AUTO_MAP = {"AutoModelForSequenceClassification": "modeling_own.OwnBertForSequenceClassification"}


@pytest.fixture
def own_code_dir(tiny_model_dir, tmp_path):
    """tiny_model_dir (its config says model_type bert) with an auto_map and a modeling file of its own."""
    folder = tmp_path / "own-code-bert"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "bert"
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": AUTO_MAP}))
    (folder / "modeling_own.py").write_text(OWN_MODELING)
    return folder


def test_spec_refuses_a_config_with_an_auto_map_or_remote_code():
    assert why_not(transformers.BertConfig(), "classification") is None  # the family itself is served
    assert why_not(transformers.BertConfig(auto_map=AUTO_MAP), "classification") == (
        "the model brings its own modeling code (auto_map in its config: AutoModelForSequenceClassification), "
        "which cpuddp's encoder would not run")
    assert why_not(transformers.BertConfig(), "qa", trust_remote_code=True) == \
        "trust_remote_code is set: the model's own code runs, not cpuddp's encoder"


def test_a_bert_with_code_of_its_own_trains_through_transformers_and_the_run_line_says_why(
        own_code_dir, data_dir, group, caplog):
    state = built(own_code_dir, data_dir, "auto", "fp32", caplog, trust_remote_code=True)
    assert type(state.model).__name__ == "OwnBertForSequenceClassification"  # its own code, loaded from the folder
    assert type(state.model).__module__.startswith("transformers_modules.")
    assert state.choice.code == "transformers"
    line = next(r.message for r in caplog.records if r.message.startswith("model code:"))
    assert line == ("model code: transformers (auto: the model brings its own modeling code (auto_map in its "
                    "config: AutoModelForSequenceClassification), which cpuddp's encoder would not run)")
    with pytest.raises(UserError, match="train.model_code cpuddp: the model brings its own modeling code"):
        built(own_code_dir, data_dir, "cpuddp", "fp32", caplog, trust_remote_code=True)


def test_any_model_loaded_with_trust_remote_code_trains_through_transformers(tiny_model_dir, data_dir, group,
                                                                            caplog):
    state = built(tiny_model_dir, data_dir, "auto", "fp32", caplog, trust_remote_code=True)
    assert not isinstance(state.model, encoder.PackedModel) and state.choice.code == "transformers"
    assert state.choice.why == "auto: trust_remote_code is set: the model's own code runs, not cpuddp's encoder"
