"""The Intel stack: version pairing, ccl environment, IPEX decisions.

Runs in the main env (no IPEX, no ccl) and in the Intel env (`make
test-intel`: torch 2.8 + IPEX 2.8), where the IPEX tests below also run.
"""

from __future__ import annotations

import copy

import pytest


from workflow.scripts.settings import config as cfg
from workflow.scripts.nodes import describe as environment
from workflow.scripts.settings.views import EnvironmentView
from workflow.scripts.probes import intel, oneccl
from helpers.ipex import needs_ipex
from helpers.messages import one_line
from workflow.scripts.common.errors import UserError



# ---------------------------------------------------------------- pairing

@pytest.mark.parametrize("torch_version, ipex_version", [
    ("2.8.0", "2.8.0"), ("2.8.0+cpu", "2.8.0+cpu"), ("2.8.1", "2.8.0"), ("2.7.1+cpu", "2.7.0"),
])
def test_ipex_same_major_minor_pairs(torch_version, ipex_version):
    intel.check_ipex_pair(torch_version, ipex_version)


def test_ipex_with_newer_torch_names_both_versions_and_the_fix():
    with pytest.raises(UserError) as err:
        intel.check_ipex_pair("2.13.0", "2.8.0")
    message = one_line(err)
    assert "intel-extension-for-pytorch 2.8.0 needs torch 2.8.*, but torch 2.13.0 is installed" in message
    assert "pip install torch==2.8.0" in message and "train.ipex: false" in message
    assert "intel-extension-for-pytorch==2.13" not in message  # no such release


def test_ipex_with_older_torch_offers_either_side():
    with pytest.raises(UserError) as err:
        intel.check_ipex_pair("2.7.1", "2.8.0")
    message = one_line(err)
    assert "pip install torch==2.8.0" in message and "intel-extension-for-pytorch==2.7.*" in message


@pytest.mark.parametrize("torch_version, ccl_version", sorted(
    [(t if t.count(".") == 2 else f"{t}.0", c) for t, c in oneccl.CCL_PAIRS.items()]
    + [("2.7.1+cpu", "2.7.0+cpu"), ("2.1.2", "2.1.0+cpu")]))
def test_every_released_ccl_pair_passes(torch_version, ccl_version):
    oneccl.check_ccl_pair(torch_version, ccl_version)


def test_ccl_for_torch_2_8_names_the_source_build():
    with pytest.raises(UserError) as err:
        oneccl.check_ccl_pair("2.8.0", "2.7.0+cpu")
    message = one_line(err)
    assert "oneccl_bind_pt 2.7.0+cpu (built for torch 2.7) does not pair with torch 2.8.0" in message
    assert "no oneccl_bind_pt wheel exists for torch 2.8: build it from source for torch 2.8: make intel-venv" \
        in message
    assert "distributed.backend: gloo" in message
    oneccl.check_ccl_pair("2.8.0+cu128", "2.8.0+cpu")  # the source build pairs with either build of torch 2.8


def test_ccl_for_torch_without_any_build_says_what_to_use():
    with pytest.raises(UserError) as err:
        oneccl.check_ccl_pair("2.13.0", "2.8.0+cpu")
    message = one_line(err)
    assert "oneccl_bind_pt 2.8.0+cpu (built for torch 2.8) does not pair with torch 2.13.0" in message
    assert "no oneccl_bind_pt exists for torch 2.13 (the last source, intel/torch-ccl 1fc0c38, targets torch 2.8)" \
        in message and "use torch==2.8.0 and build it from source" in message


def test_ccl_for_an_older_torch_names_its_wheel():
    with pytest.raises(UserError) as err:
        oneccl.check_ccl_pair("2.6.0", "2.7.0")
    assert "pip install oneccl_bind_pt==2.6.0 --extra-index-url" in one_line(err)


def test_unknown_ccl_version_is_refused():
    with pytest.raises(UserError) as err:
        oneccl.check_ccl_pair("2.7.0", "2.7.5")
    assert "not a known release" in one_line(err)


def test_pairing_ignores_packages_this_run_does_not_use():
    mismatched = {"torch": "2.13.0", intel.IPEX_MODULE: "2.8.0", intel.CCL_PACKAGE: "2.7.0"}
    intel.check_pairing(mismatched, ipex=False, ccl=False)
    with pytest.raises(UserError, match="intel-extension-for-pytorch 2.8.0"):
        intel.check_pairing(mismatched, ipex=True, ccl=False)
    with pytest.raises(UserError, match="oneccl_bind_pt 2.7.0"):
        intel.check_pairing(mismatched, ipex=False, ccl=True)


def test_upstream_stack_passes_pairing():
    intel.check_pairing({"torch": "2.13.0", intel.IPEX_MODULE: None, intel.CCL_PACKAGE: None})


def test_environment_check_refuses_a_mismatch_before_importing(monkeypatch):
    """The environment rule stops with the versions; nothing imports IPEX (it would exit)."""
    monkeypatch.setattr(environment, "versions", lambda: {
        "python": "3.11", "torch": "2.13.0", intel.IPEX_MODULE: "2.8.0", intel.CCL_PACKAGE: None})
    monkeypatch.setattr(intel, "_import_ipex", lambda: pytest.fail("IPEX imported before the pairing check"))
    config = EnvironmentView.of({"distributed": {"backend": "auto"}, "train": {"precision": "fp32", "ipex": "auto"}})
    with pytest.raises(UserError, match="needs torch 2.8.*, but torch 2.13.0 is installed"):
        environment.describe(config.distributed, config.train)


def test_every_rank_checks_its_own_node(monkeypatch):
    monkeypatch.setattr(intel, "installed_versions", lambda: {
        "torch": "2.8.0", intel.IPEX_MODULE: "2.8.0", intel.CCL_PACKAGE: "2.7.0"})
    info = {"backend": "ccl", "precision": "fp32", "ipex": False}
    with pytest.raises(UserError, match="does not pair with torch 2.8.0"):
        intel.prepare_rank(info)


def test_rank_line_gives_every_decision_and_why():
    info = {"backend": "gloo", "backend_reason": "requested", "precision": "fp32",
            "precision_reason": "auto: no native bf16 on this CPU, falling back to fp32",
            "ipex": False, "ipex_reason": "requested off (train.ipex: false)"}
    line = intel.prepare_rank(info)
    assert line == ("backend gloo (requested); precision fp32 (auto: no native bf16 on this CPU, falling back "
                    "to fp32); ipex off (requested off (train.ipex: false))")


# ---------------------------------------------------------------- IPEX

def test_ipex_off_when_asked():
    assert intel.ipex_status(False) == (False, "requested off (train.ipex: false)")


def test_ipex_missing(monkeypatch):
    monkeypatch.setattr(intel, "installed_versions", lambda: {"torch": "2.13.0", intel.IPEX_MODULE: None})
    assert intel.ipex_status("auto") == (False, "auto: intel_extension_for_pytorch not installed")
    with pytest.raises(UserError) as err:
        intel.ipex_status(True)
    message = one_line(err)
    assert "pip install torch==2.8.0 intel-extension-for-pytorch==2.8.0" in message
    assert "train.ipex: auto" in message


def test_ipex_that_does_not_import(monkeypatch):
    monkeypatch.setattr(intel, "installed_versions", lambda: {"torch": "2.8.0", intel.IPEX_MODULE: "2.8.0"})

    def broken():
        raise UserError("intel_extension_for_pytorch does not import on host (OSError: libfoo.so)")

    monkeypatch.setattr(intel, "_import_ipex", broken)
    enabled, why = intel.ipex_status("auto")
    assert not enabled and "does not import" in why
    with pytest.raises(UserError, match="does not import"):
        intel.ipex_status(True)


def test_schema_takes_auto_true_false():
    base = {"experiment": "x", "task": "mrpc", "model": "m"}
    for value in ("auto", True, False):
        assert cfg.validate({**base, "train": {"ipex": value}})["train"]["ipex"] == value
    assert cfg.validate(base)["train"]["ipex"] == "auto"
    with pytest.raises(cfg.ConfigError, match="train.ipex"):
        cfg.validate({**base, "train": {"ipex": "yes"}})


def tiny_classifier():
    import torch
    from transformers import AutoModelForSequenceClassification, BertConfig

    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64))


@needs_ipex
def test_ipex_auto_is_on_where_installed():
    enabled, why = intel.ipex_status("auto")
    assert enabled and why.startswith("auto: intel_extension_for_pytorch 2.8")


@needs_ipex
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_optimize_training_keeps_plain_weights(precision):
    import torch

    model = tiny_classifier()
    before = {k: (v.shape, v.dtype) for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = intel.optimize_training(model, optimizer, intel.torch_dtype(precision))
    if precision == "bf16" and intel.prepacks(torch.bfloat16):
        assert intel.ipex_modules(model) > 0  # fp32 AdamW training: IPEX has nothing to swap in
    batch = {"input_ids": torch.randint(0, 100, (4, 8)), "labels": torch.tensor([0, 1, 0, 1])}
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    after = {k: (v.shape, v.dtype) for k, v in model.state_dict().items()}
    assert after == before  # what save_pretrained writes is unchanged in form
    plain = intel.plain_model(model)
    assert intel.ipex_modules(plain) == 0 and plain.dtype == torch.float32
    for name, tensor in plain.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name  # the fp32 master weights, not bf16


@needs_ipex
def test_optimize_inference_matches_the_plain_model():
    import torch

    model = tiny_classifier().eval()
    ids = torch.randint(0, 100, (2, 8))
    with torch.inference_mode():
        expected = model(input_ids=ids).logits
    fast = intel.optimize_inference(tiny_classifier(), torch.float32)
    assert intel.ipex_modules(fast) > 0
    with torch.inference_mode():
        assert torch.allclose(fast(input_ids=ids).logits, expected, atol=1e-4)


@needs_ipex
def test_ipex_checkpoint_resumes_exactly():
    """A resumed run (model and optimizer state_dicts) continues like the original."""
    import torch

    def optimized():
        model = tiny_classifier()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        return intel.optimize_training(model, optimizer, torch.bfloat16)

    def step(model, optimizer):
        torch.manual_seed(1)  # same dropout
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=torch.arange(16).view(2, 8), labels=torch.tensor([0, 1])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    model, optimizer = optimized()
    step(model, optimizer)
    saved = copy.deepcopy((model.state_dict(), optimizer.state_dict()))  # as written to disk
    step(model, optimizer)
    resumed, resumed_optimizer = optimized()
    resumed.load_state_dict(saved[0])
    resumed_optimizer.load_state_dict(saved[1])
    step(resumed, resumed_optimizer)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name
