"""Gradient accumulation, for real: 1 rank x 4 micro-batches, 2 ranks x 2 and
4 ranks x 1 reach the weights of 1 rank with the 4x batch, and all-reduce
runs once per update.

Real 2- and 4-rank trainings under mpirun, a tiny BERT without dropout
(dropout draws differ per rank, so they would differ per layout), fp32.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers.workflow import task_experiment
from helpers.native_files import write_native
from workflow.scripts.settings import config as cfg
from workflow.scripts.data import load as data
from workflow.scripts.data import tokenize as tokenize_data
from workflow.scripts.launch import job
from workflow.scripts.nodes import describe
from workflow.scripts.settings.views import TrainView

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GLOBAL_BATCH, STEPS = 16, 6  # 48 training pairs: 3 updates per epoch, 2 epochs
# The layouts differ only in the order fp32 sums are taken (within a batch,
# across micro-batches, across ranks in gloo's all-reduce): about 1e-7 of a
# gradient, which six AdamW steps carry into the weights at the same scale
# (measured: 6e-8, one or two ulps of weights around 0.05). A wrong loss
# scaling or one sample more or less changes the updates themselves: half
# the global batch differs by over 1e-4 (the second test). 1e-6 sits between.
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def no_dropout_model(tmp_path_factory, tiny_model_dir):
    from transformers import AutoConfig, BertModel

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.update({"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "classifier_dropout": 0.0})
    out = tmp_path_factory.mktemp("no-dropout")
    torch.manual_seed(0)
    BertModel(config).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny_model_dir / name).is_file():
            (out / name).write_bytes((tiny_model_dir / name).read_bytes())
    return out


@pytest.fixture(scope="module")
def run_layout(tmp_path_factory, no_dropout_model):
    work = tmp_path_factory.mktemp("accumulation")
    base = task_experiment("mrpc", no_dropout_model, write_native("mrpc", work / "files", 48, 16))
    base["train"].update(epochs=2, learning_rate=1e-3, log_every=1)
    conf = work / "data.json"
    conf.write_text(json.dumps(cfg.validate(base)))
    data.main(["--config", str(conf), "--out", str(work / "raw")])
    tokenize_data.main(["--config", str(conf), "--data", str(work / "raw"), "--out", str(work / "tok")])

    done = {}

    def run(world: int, accumulation: int, global_batch: int = GLOBAL_BATCH) -> tuple[dict, dict]:
        if (world, accumulation, global_batch) not in done:
            done[world, accumulation, global_batch] = train(world, accumulation, global_batch)
        return done[world, accumulation, global_batch]

    def train(world: int, accumulation: int, global_batch: int) -> tuple[dict, dict]:
        per_rank = global_batch // (world * accumulation)
        config = cfg.validate({**base, "train": {**base["train"], "batch_size": per_rank,
                                                 "gradient_accumulation_steps": accumulation},
                               "distributed": {**base["distributed"], "processes_per_node": world,
                                               "threads_per_process": 1, "backend": "gloo"}})
        out = work / f"w{world}a{accumulation}g{global_batch}"
        out.mkdir()
        (out / "train.json").write_text(json.dumps(config))
        view = TrainView.pick(config)  # this launch's config, typed once
        info = describe.environment_record(view.distributed, view.train)
        (out / "environment.json").write_text(json.dumps(info))
        program = [sys.executable, "-m", "workflow.scripts.train.rank", "--config", str(out / "train.json"),
                   "--environment", str(out / "environment.json"), "--data", str(work / "tok"), "--out", str(out),
                   "--log-dir", str(out / "logs")]
        job.run(view.distributed, info, program, out / "logs", quiet=True)
        metrics = json.loads((out / "train_metrics.json").read_text())
        return metrics, load_file(out / "model" / "model.safetensors")

    env = {"PYTHONPATH": str(REPO), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield run
    for key, value in old.items():
        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


def max_difference(first: dict, second: dict) -> float:
    assert first.keys() == second.keys()
    return max(float((first[k] - second[k]).abs().max()) for k in first)


def test_every_split_of_the_global_batch_reaches_the_same_weights(run_layout):
    reference_metrics, reference = run_layout(1, 1)
    assert reference_metrics["steps"] == STEPS and reference_metrics["global_batch"] == GLOBAL_BATCH
    differences = {}
    for world, accumulation in ((1, 4), (2, 2), (4, 1)):
        metrics, weights = run_layout(world, accumulation)
        assert (metrics["world_size"], metrics["gradient_accumulation_steps"]) == (world, accumulation)
        assert metrics["global_batch"] == GLOBAL_BATCH and metrics["steps"] == STEPS
        assert metrics["batch_size_per_rank"] * world * accumulation == GLOBAL_BATCH
        for rank in metrics["ranks"]:
            # all-reduce once per update: only the last micro-batch's backward reduces
            assert rank["backward_passes"] == STEPS * accumulation
            assert rank["reducing_backward_passes"] == STEPS
            assert rank["buckets_reduced"] % STEPS == 0
        assert len({r["weights_sha256"] for r in metrics["ranks"]}) == 1
        differences[(world, accumulation)] = max_difference(reference, weights)
    print(f"\nlargest weight difference to 1 rank x batch {GLOBAL_BATCH}: {differences}")
    assert all(d <= TOLERANCE for d in differences.values()), differences


def test_the_tolerance_tells_a_different_global_batch_apart(run_layout):
    """The check can fail: half the global batch trains other updates."""
    _, reference = run_layout(1, 1)
    _, half = run_layout(1, 1, global_batch=GLOBAL_BATCH // 2)
    assert max_difference(reference, half) > 100 * TOLERANCE
