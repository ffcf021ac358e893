"""What the run needs from the Hub (settings/hub.py): asked by Snakemake's
main process only (cfg.check_hub), never while the workflow is parsed
(cfg.load_config runs in every job, also on nodes without a route to the
Hub). The Hub is tests/helpers/fake_hub.py on loopback (HF_ENDPOINT) or a
host that does not resolve: only the network boundary is replaced."""

from __future__ import annotations

import socket

import pytest
from huggingface_hub import constants

from helpers import fake_hub
from helpers.hub_cache import cache_model
from helpers.messages import one_line
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings import hub

CONFIG = {"experiment": "x", "task": "mrpc", "model": "bert-base-uncased"}


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # read when the check runs, as a user's shell sets it
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return tmp_path / "hf"


@pytest.fixture
def online(tmp_path, monkeypatch, empty_cache):
    """The fake Hub as HF_ENDPOINT, offline mode off, a write token; yields its request log."""
    log = tmp_path / "hub.log"
    with fake_hub.running(log) as endpoint:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        monkeypatch.setenv("HF_TOKEN", fake_hub.WRITE)
        yield log


def test_the_parse_asks_nothing_of_the_network(monkeypatch, empty_cache):
    """A job on a compute node without a route to the Hub parses the workflow
    with deploy.push_to_hub and a Hub model: no lookup, no refusal."""
    def no_network(*args, **kwargs):
        raise AssertionError("load_config asked the network")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    loaded = cfg.load_config({**CONFIG, "deploy": {"push_to_hub": "me/tiny-mrpc"}})
    assert loaded["deploy"]["push_to_hub"] == "me/tiny-mrpc"


def test_a_model_offline_and_not_cached_is_one_line(monkeypatch, empty_cache, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(cfg.ConfigError) as err:
        cfg.check_hub(cfg.load_config(CONFIG, tmp_path), tmp_path)
    message = one_line(err)
    assert "cannot fetch 'bert-base-uncased'" in message and "HF_HUB_OFFLINE is set" in message
    assert "not in the Hugging Face cache" in message and "`hf download bert-base-uncased`" in message


def test_a_cached_or_fetched_model_needs_no_hub(monkeypatch, empty_cache, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cache_model(empty_cache, "bert-base-uncased")
    cfg.check_hub(cfg.load_config(CONFIG, tmp_path), tmp_path)
    (tmp_path / "results/x/data/models/acme--tiny").mkdir(parents=True)  # fetched by an earlier run
    cfg.check_hub(cfg.load_config({**CONFIG, "model": "acme/tiny"}, tmp_path), tmp_path)


def test_a_model_the_hub_does_not_have(online, tmp_path):
    cfg.check_hub(cfg.load_config({**CONFIG, "model": "acme/tiny-bert"}, tmp_path), tmp_path)
    with pytest.raises(cfg.ConfigError) as err:
        cfg.check_hub(cfg.load_config({**CONFIG, "model": "acme/nope"}, tmp_path), tmp_path)
    assert "cannot fetch 'acme/nope'" in one_line(err) and "the Hub has no such model" in one_line(err)


def test_a_hub_host_that_does_not_resolve(monkeypatch, empty_cache, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    with pytest.raises(cfg.ConfigError) as err:
        cfg.check_hub(cfg.load_config(CONFIG, tmp_path), tmp_path)
    assert "hub.invalid does not resolve" in one_line(err)


@pytest.mark.parametrize("token, why", [
    (fake_hub.READ, "the token of me may not write to me/tiny-mrpc"),
    ("hf_revoked", "Invalid user token"),
    (None, "no Hugging Face token"),
])
def test_push_needs_a_token_that_may_write(online, monkeypatch, tmp_path, token, why):
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    else:
        monkeypatch.delenv("HF_TOKEN")
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
        monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    config = cfg.load_config({**CONFIG, "model": "acme/tiny-bert", "deploy": {"push_to_hub": "me/tiny-mrpc"}})
    with pytest.raises(cfg.ConfigError) as err:
        cfg.check_hub(config, tmp_path)
    assert "deploy.push_to_hub: me/tiny-mrpc cannot be uploaded from here" in one_line(err)
    assert why in one_line(err)


def test_push_with_a_write_token_passes(online, tmp_path):
    config = cfg.load_config({**CONFIG, "model": "acme/tiny-bert", "deploy": {"push_to_hub": "me/tiny-mrpc"}})
    cfg.check_hub(config, tmp_path)
    assert [r["path"] for r in fake_hub.requests(online)][-1] == "/api/whoami-v2"


def test_push_is_refused_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE is set" in hub.push_problem("me/tiny-mrpc")
    assert hub.push_problem(None) is None


def test_fine_grained_tokens_write_where_they_are_scoped():
    def me(permissions, name="acme"):
        scoped = [{"entity": {"type": "org", "name": name}, "permissions": permissions}]
        return {"name": "me", "auth": {"accessToken": {"role": "fineGrained", "fineGrained": {"scoped": scoped}}}}

    assert hub.may_write(me(["repo.content.read", "repo.write"]), "acme/model")
    assert not hub.may_write(me(["repo.content.read"]), "acme/model")
    assert not hub.may_write(me(["repo.write"], name="other"), "acme/model")
    assert not hub.may_write({"name": "me", "auth": {"accessToken": {"role": "read"}}}, "me/model")
