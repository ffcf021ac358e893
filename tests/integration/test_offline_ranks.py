"""The model fetched once, on the launch node: a Hub id goes through the
Hugging Face cache (pre-fetched there, HF_HUB_OFFLINE=1 for the workflow as
on a login node that fetched it earlier) into results/<exp>/data/models/<model>, and
the ranks train from that copy with the network taken away from them: a
sitecustomize refuses and notes any lookup or connection leaving the
machine, and HF_ENDPOINT points at a closed local port."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

from helpers.workflow import snakemake, write_config
from helpers.native_files import write_native
from helpers.workflow import task_experiment as experiment

HERE = Path(__file__).resolve().parent
HUB_ID = "cpuddp-test/tiny-bert"


def prefetched_cache(hf_home: Path, model_dir: Path) -> None:
    """The Hub cache layout `hf download` leaves: refs/main -> snapshot."""
    repo = hf_home / "hub" / ("models--" + HUB_ID.replace("/", "--"))
    commit = "0" * 40
    shutil.copytree(model_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the block ends: nothing listens there


def test_ranks_train_from_the_fetched_copy_without_the_network(tmp_path, tiny_model_dir, monkeypatch):
    prefetched_cache(tmp_path / "hf", tiny_model_dir)
    net_log = tmp_path / "net.jsonl"
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("CPUDDP_NET_LOG", str(net_log))
    monkeypatch.setenv("PYTHONPATH", str(HERE / "offline_ranks"))
    config = experiment("mrpc", HUB_ID, write_native("mrpc", tmp_path / "files", 32, 8), processes=2)
    config["experiment"] = "offline"
    config["train"].update(max_steps=2)
    config["distributed"]["env"] = {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
                                    "CPUDDP_NET_LOG": str(net_log)}
    snakemake(tmp_path, write_config(tmp_path / "offline.yaml", config), "results/offline/default/model")

    fetched = tmp_path / "results" / "offline" / "data" / "models" / "cpuddp-test--tiny-bert"
    assert (fetched / "model.safetensors").is_file() and not (fetched / "model.safetensors").is_symlink()
    train_cfg = json.loads((tmp_path / "results" / "offline" / "default" / "config" / "train.json").read_text())
    assert train_cfg["model"] == "results/offline/data/models/cpuddp-test--tiny-bert"  # the local copy
    notes = [json.loads(line) for line in net_log.read_text().splitlines()]
    starts = [n for n in notes if n["kind"] == "start"]
    assert {n["rank"] for n in starts} == {"0", "1"}  # both ranks ran under the guard (pin and rank processes)
    assert all(n["what"] == "1" for n in starts)  # HF_HUB_OFFLINE=1 from the launcher
    assert [n for n in notes if n["kind"] != "start"] == []  # no lookup, no connection left the machine
    assert (tmp_path / "results" / "offline" / "default" / "model" / "model.safetensors").is_file()
