"""The offline data error: at once when the Hub's host does not resolve, one
line, naming every key of the local-file setup (format included). Only the
name lookup (the network boundary) is replaced."""

from __future__ import annotations

import socket
import time

import datasets
import pytest

from workflow.scripts.common.tasks import get_task
from workflow.scripts.data import hub_check, load
from workflow.scripts.data.errors import HubUnavailableError
from workflow.scripts.settings.views import DataView


@pytest.fixture
def no_dns(monkeypatch):
    looked_up = []

    def getaddrinfo(host, *args, **kwargs):
        looked_up.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    def load_dataset(*args, **kwargs):
        raise AssertionError("load_dataset must not be tried when the Hub does not resolve")

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return looked_up


def test_default_config_offline_fails_at_once_in_one_line(no_dns):
    started = time.monotonic()
    with pytest.raises(HubUnavailableError) as err:
        load.load(DataView.of({"task": "mrpc", "data": None}))
    message = str(err.value)
    assert time.monotonic() - started < 1 and no_dns == ["huggingface.co"]
    assert "\n" not in message
    assert message.startswith("cannot download nyu-mll/glue/mrpc from the Hugging Face Hub (huggingface.co "
                               "does not resolve")
    assert "set data.train, data.validation, data.format (format one of glue_tsv" in message
    assert "docs/tasks.md, Data" in message


def test_every_key_of_the_task_is_named():
    assert hub_check.local_keys(get_task("mnli"))[-1] == "data.validation_mismatched"
    assert hub_check.local_keys(get_task("classification"))[-2:] == ["data.text_columns", "data.label_column"]


def test_offline_mode_reads_the_cache_without_a_lookup(no_dns, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub_check.require_hub(get_task("mrpc"), "nyu-mll/glue/mrpc")
    assert no_dns == []


def test_hf_endpoint_is_the_host_checked(no_dns, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.mirror.example:8443")
    with pytest.raises(HubUnavailableError, match="hub.mirror.example does not resolve"):
        hub_check.require_hub(get_task("sst2"), "nyu-mll/glue/sst2")
