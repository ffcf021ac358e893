"""The Intel stack: version pairing, ccl environment, IPEX decisions.

Runs in the main env (no IPEX, no ccl) and in the Intel env (`make
test-intel`: torch 2.8 + IPEX 2.8), where the IPEX tests below also run.
"""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from helpers.fake_ccl import fake_ccl_package, stand_in_ccl
from helpers.workflow import snakemake, tiny_experiment, write_config

from workflow.scripts.common import config as cfg
from workflow.scripts.nodes import describe as environment
from workflow.scripts.common import intel, oneccl
from workflow.scripts.launch import command as launch
from workflow.scripts.common.errors import UserError

HAS_IPEX = intel.installed_versions()[intel.IPEX_MODULE] is not None
needs_ipex = pytest.mark.skipif(not HAS_IPEX, reason="IPEX is not installed here: runs in `make test-intel`")


def one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


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
    config = {"distributed": {"backend": "auto"}, "train": {"precision": "fp32", "ipex": "auto"}}
    with pytest.raises(UserError, match="needs torch 2.8.*, but torch 2.13.0 is installed"):
        environment.describe(config)


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


# ---------------------------------------------------------------- ccl environment

def fake_source_build(prefix):
    """A venv with oneccl / impi-rt from PyPI and the bindings built against them."""
    package = prefix / "lib/python3.11/site-packages" / oneccl.CCL_MODULE
    (package / "lib").mkdir(parents=True)
    (package / "lib/liboneccl_bindings_for_pytorch.so").touch()
    for name in ("libccl.so.1", "libmpi.so.12", "libfabric.so.1", "libtcp-fi.so", "librxm-fi.so"):
        (prefix / "lib" / name).touch()
    (prefix / "bin").mkdir()
    (prefix / "include").mkdir()
    return package


def test_ccl_environment_is_what_setvars_exports(tmp_path):
    root = fake_ccl_package(tmp_path / "oneccl_bindings_for_pytorch")
    env = oneccl.ccl_environment(root, environ={"LD_LIBRARY_PATH": "/site/lib", "PATH": "/usr/bin"})
    assert env["CCL_ROOT"] == str(root)
    assert env["I_MPI_ROOT"] == str(root)
    assert env["LD_LIBRARY_PATH"] == ":".join(
        [str(root / "lib"), str(root / "opt/mpi/lib"), str(root / "opt/mpi/libfabric/lib"), "/site/lib"])
    assert env["LIBRARY_PATH"].startswith(str(root / "lib"))
    assert env["PATH"] == f"{root / 'bin'}:{root / 'opt/mpi/bin'}:/usr/bin"
    assert env["CPATH"] == str(root / "include")
    assert env["FI_PROVIDER_PATH"] == str(root / "opt/mpi/libfabric/lib/prov")


def test_ccl_environment_keeps_a_site_intel_mpi(tmp_path):
    root = tmp_path / "pkg"
    (root / "lib/prov").mkdir(parents=True)
    (root / "lib/libccl.so.1").touch()
    env = oneccl.ccl_environment(root, environ={"I_MPI_ROOT": "/opt/intel/mpi"})
    assert env["I_MPI_ROOT"] == "/opt/intel/mpi"
    assert env["FI_PROVIDER_PATH"] == str(root / "lib/prov")
    assert env["LD_LIBRARY_PATH"] == str(root / "lib") and "PATH" not in env


def test_ccl_environment_of_the_source_build_is_the_venv(tmp_path):
    """Built against oneCCL from PyPI: oneCCL, Intel MPI and libfabric's providers live in the venv."""
    prefix = tmp_path / "venv"
    package = fake_source_build(prefix)
    assert oneccl.oneccl_root(package) == prefix
    env = oneccl.ccl_environment(package, environ={"PATH": "/usr/bin"})
    assert env["CCL_ROOT"] == env["I_MPI_ROOT"] == str(prefix)
    assert env["LD_LIBRARY_PATH"] == str(prefix / "lib") and env["FI_PROVIDER_PATH"] == str(prefix / "lib")
    assert env["PATH"] == f"{prefix / 'bin'}:/usr/bin" and env["CPATH"] == str(prefix / "include")


def test_ccl_environment_empty_without_the_package(monkeypatch):
    monkeypatch.setattr(oneccl, "ccl_package_dir", lambda: None)
    assert oneccl.ccl_environment() == {}


def test_ccl_ranks_get_the_setvars_environment(tmp_path, monkeypatch):
    root = fake_ccl_package(tmp_path / "oneccl_bindings_for_pytorch")
    monkeypatch.setattr(oneccl, "ccl_package_dir", lambda: root)
    info = {"threads_per_process": 2, "mpi": {"flavour": "intel"}, "backend": "ccl"}
    env = launch.rank_env(info, {"CCL_ROOT": "/mine"}, "10.0.0.1", 29500)
    assert env["CCL_WORKER_COUNT"] == "1"
    assert env["LD_LIBRARY_PATH"].startswith(str(root / "lib"))
    assert env["CCL_ROOT"] == "/mine"  # distributed.env still wins
    gloo = launch.rank_env({**info, "backend": "gloo"}, {}, "10.0.0.1", 29500)
    assert "CCL_ROOT" not in gloo and "CCL_WORKER_COUNT" not in gloo


@pytest.mark.skipif(oneccl.ccl_package_dir() is not None,
                    reason="oneccl_bindings_for_pytorch is installed here: runs in `make test-integration`")
def test_ccl_requested_where_missing_says_how_to_install():
    with pytest.raises(UserError) as err:
        environment.choose_backend("ccl")
    message = one_line(err)
    assert message.startswith("backend ccl requested but oneccl_bindings_for_pytorch does not import")
    assert "make intel-venv" in message or "--extra-index-url" in message  # torch 2.8 / older torch
    assert "distributed.backend: gloo" in message


def test_auto_backend_records_why(monkeypatch):
    backend, why = environment.choose_backend("auto")
    assert (backend, why) in {
        ("gloo", "auto: oneccl_bindings_for_pytorch not importable"),
        ("ccl", "auto: oneccl_bindings_for_pytorch imports; ranks of a node share memory, where oneCCL's "
                "all-reduce measured faster than gloo's")}


@pytest.mark.parametrize("ranks_per_node, nodes, pays", [(2, 1, True), (2, 2, True), (1, 2, False), (1, 1, False)])
def test_auto_picks_ccl_where_it_pays(monkeypatch, ranks_per_node, nodes, pays):
    monkeypatch.setattr(environment.importlib, "import_module", lambda name: None)  # as if the bindings import
    backend, why = environment.choose_backend("auto", ranks_per_node, nodes)
    assert backend == ("ccl" if pays else "gloo") and why.startswith("auto: oneccl_bindings_for_pytorch imports; ")
    assert environment.choose_backend("ccl", ranks_per_node, nodes) == ("ccl", "requested")


def test_ccl_install_hint_per_torch():
    assert "oneccl_bind_pt==2.7.0" in oneccl.ccl_install_hint("2.7.1+cpu")
    assert "make intel-venv" in oneccl.ccl_install_hint("2.8.0")
    assert oneccl.ccl_install_hint("2.13.0").startswith("no oneccl_bind_pt exists for torch 2.13 ")


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
    if precision == "bf16":
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


# ---------------------------------------------------------------- ccl error paths
# The real bindings are built and run in the Intel env (test_intel_stack.py,
# test_multinode.py). What a real build cannot show, a package of the same
# name shows: a "ccl" backend that is gloo inside, under a version that does
# not pair with the installed torch.

def ccl_experiment(tmp_path, tiny_model_dir):
    config = yaml.safe_load(tiny_experiment(tmp_path, tiny_model_dir).read_text())
    config["train"].update(epochs=1)
    config["distributed"].update(backend="auto")
    return write_config(tmp_path / "ccl.yaml", config)


def with_site(monkeypatch, site):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))


def test_mismatched_ccl_stops_the_environment_rule(tmp_path, tiny_model_dir, monkeypatch):
    stand_in_ccl(tmp_path / "site", version="2.7.0+cpu")
    with_site(monkeypatch, tmp_path / "site")
    done = snakemake(tmp_path, ccl_experiment(tmp_path, tiny_model_dir), "results/tiny/default/environment.json",
                     check=False)
    assert done.returncode != 0, done.stdout
    assert (tmp_path / "logs").exists(), done.stderr[-3000:]
    log = (tmp_path / "logs/environment_check/tiny/default.log").read_text().strip().splitlines()
    torch_version = intel.installed_versions()["torch"]
    assert log[-1].startswith(f"error: oneccl_bind_pt 2.7.0+cpu (built for torch 2.7) does not pair with "
                              f"torch {torch_version}: "), log[-1]
