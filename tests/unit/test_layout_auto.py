"""processes_per_node auto (settings/layout.py, train/tune.py --auto): which
runs measure, the cache's key and folder, the pick, the recorded reason,
and the cache used instead of a second burst (bursts faked: no processes)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from workflow.scripts.common.errors import UserError
from workflow.scripts.nodes import check
from workflow.scripts.settings import layout
from workflow.scripts.settings.views import DistributedSettings
from workflow.scripts.train import tune

SHAPE = {"model": "bert:abc", "task": "mrpc", "batch_size": 16, "gradient_accumulation_steps": 1,
         "max_seq_length": 128, "precision": "fp32", "model_code": "auto", "speed": {}, "lora": None,
         "backend": "auto", "bucket_cap_mb": 25, "gradient_compression": "none",
         "lengths": {"mean": 40.5, "p10": 20, "p50": 38, "p90": 70, "max": 128}}
TABLE = [{"processes_per_node": 1, "threads_per_process": 2, "batch_size": 16, "gradient_accumulation_steps": 1,
          "train_samples_per_second": 50.2},
         {"processes_per_node": 2, "threads_per_process": 1, "batch_size": 8, "gradient_accumulation_steps": 1,
          "train_samples_per_second": 77.3}]


def raw(ranks, threads):
    return {"processes_per_node": ranks, "threads_per_process": threads}


def dist(ranks, threads):
    return DistributedSettings.of(raw(ranks, threads))


def record(**changes):
    return {"cpu_model": "AMD EPYC 9B14", "cores": 2, "shape": SHAPE, "warmup_steps": 3, "steps": 24,
            "timing": layout.TIMING, "table": TABLE, "dropped": [],
            "best": layout.pick(TABLE), "measured_at": "2026-11-26T22:00:00Z", "cache_file": "/c/x.json",
            "cached": False, **changes}


@pytest.mark.parametrize("ranks, threads, measured", [
    ("auto", "auto", True), ("auto", 1, False), (2, "auto", False), (2, 1, False), (2, "tuned", True),
])
def test_only_auto_ranks_without_a_thread_number_are_measured(ranks, threads, measured):
    assert layout.measured(raw(ranks, threads)) is measured


def test_tuned_threads_are_the_measured_layout():
    old = raw(2, "tuned")
    layout.normalize(old)
    assert old == raw("auto", "auto")


def test_numbers_win_with_no_burst():
    chosen = layout.decide(dist(2, "auto"), record(), cores=2)
    assert (chosen.processes_per_node, chosen.threads_per_process, chosen.source) == (2, "auto", "set")
    assert chosen.reason == "processes_per_node 2 as set (no burst)"
    chosen = layout.decide(dist("auto", 1), None, cores=56)
    assert (chosen.processes_per_node, chosen.threads_per_process, chosen.source) == (56, 1, "threads")
    assert "56 cores / 1 = 56 rank(s) (no burst)" in chosen.reason


def test_auto_takes_the_faster_layout_and_says_why():
    chosen = layout.decide(dist("auto", "auto"), record(), cores=2)
    assert (chosen.processes_per_node, chosen.threads_per_process, chosen.source) == (2, 1, "measured")
    assert chosen.reason == ("auto: 2 x 1 (ranks x threads) at 77.3 samples/s, against 1 x 2 50.2; bursts of 3 "
                             "warm-up + 24 timed updates sampled across the epoch's lengths at global batch 16 "
                             "per node (8 per rank x 1 accumulation at the pick) on AMD EPYC 9B14 (2 cores); "
                             "measured now, cached in /c/x.json")
    assert (chosen.batch_size, chosen.gradient_accumulation_steps) == (8, 1)  # the global batch kept: 16
    cached = layout.decide(dist("auto", "auto"), record(cached=True), cores=2)
    assert cached.source == "cached" and "cached (/c/x.json, measured 2026-11-26T22:00:00Z)" in cached.reason
    with pytest.raises(UserError, match="processes_per_node is auto but no measured layout was given"):
        layout.decide(dist("auto", "auto"), None, cores=2)


def test_the_pick_is_the_fastest_and_a_tie_goes_to_fewer_ranks():
    assert layout.pick(TABLE) == {"processes_per_node": 2, "threads_per_process": 1, "batch_size": 8,
                                  "gradient_accumulation_steps": 1}
    slower_two = [dict(TABLE[0]), {**TABLE[1], "train_samples_per_second": 40.0}]
    assert layout.pick(slower_two)["processes_per_node"] == 1
    tie = [{**row, "train_samples_per_second": 60.0} for row in reversed(TABLE)]
    assert layout.pick(tie)["processes_per_node"] == 1


def test_the_key_names_the_cpu_and_changes_with_cpu_cores_and_shape():
    xeon = "Intel(R) Xeon(R) Platinum 8480+"
    key = layout.cache_key(xeon, 56, SHAPE)
    assert key.startswith("Intel-R-Xeon-R-Platinum-8480-56c-") and "/" not in key
    assert key == layout.cache_key(xeon, 56, dict(SHAPE))
    others = {layout.cache_key("AMD EPYC 9B14", 56, SHAPE), layout.cache_key(xeon, 2, SHAPE),
              layout.cache_key(xeon, 56, {**SHAPE, "batch_size": 32})}
    assert key not in others and len(others) == 3


def test_the_shape_is_the_runs_step_and_a_model_folder_its_architecture(tmp_path):
    for name, width in (("a", 32), ("b", 32), ("c", 64)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(
            {"model_type": "bert", "hidden_size": width, "_name_or_path": name, "transformers_version": name}))
    run = {"task": "mrpc", "model": str(tmp_path / "a"),
           "train": {"batch_size": 8, "max_seq_length": 64, "precision": "fp32", "epochs": 3, "learning_rate": 1e-3}}
    shape = layout.shape(run)
    assert shape["model"].startswith("bert:") and shape["batch_size"] == 8 and "epochs" not in shape
    assert layout.shape({**run, "model": str(tmp_path / "b")}) == shape  # the same model fetched twice
    assert layout.shape({**run, "model": str(tmp_path / "c")})["model"] != shape["model"]
    assert layout.shape({**run, "model": "org/name"})["model"] == "org/name"  # not a folder: its name


def test_the_cache_folder_is_the_env_var_else_xdg_else_home():
    assert layout.cache_dir({"CPUDDP_LAYOUT_CACHE": "/x", "XDG_CACHE_HOME": "/y"}) == Path("/x")
    assert layout.cache_dir({"XDG_CACHE_HOME": "/y"}) == Path("/y/cpuddp/layouts")
    assert layout.cache_dir({}) == Path.home() / ".cache/cpuddp/layouts"


def test_a_cache_entry_counts_only_for_its_own_key(tmp_path):
    path = tmp_path / "entry.json"
    assert layout.read_cached(path, "AMD EPYC 9B14", 2, SHAPE) is None  # missing
    path.write_text("{not json")
    assert layout.read_cached(path, "AMD EPYC 9B14", 2, SHAPE) is None  # damaged: measured again
    path.write_text(json.dumps(record()))
    assert layout.read_cached(path, "AMD EPYC 9B14", 2, SHAPE)["best"]["processes_per_node"] == 2
    assert layout.read_cached(path, "AMD EPYC 9B14", 4, SHAPE) is None
    path.write_text(json.dumps({k: v for k, v in record().items() if k != "timing"}))
    assert layout.read_cached(path, "AMD EPYC 9B14", 2, SHAPE) is None  # timed on the first batches: again


def test_one_burst_per_cpu_and_shape_then_the_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(tune.hardware, "cpu_summary", lambda: {"cpu_model": "Test CPU"})
    monkeypatch.setattr(tune.hardware, "usable_cores", lambda summary: 2)
    bursts = []

    def run_training(config, data, work, what):
        train = config["train"]
        bursts.append((config["distributed"]["processes_per_node"], train["batch_size"],
                       train["gradient_accumulation_steps"], train["sample_updates"]))
        return {}, {"train_samples_per_second": 1.0, "steady_samples_per_second": {1: 10.0, 2: 30.0}[bursts[-1][0]]}

    monkeypatch.setattr(tune, "run_training", run_training)
    data = tokenized(tmp_path / "tok", [3, 5, 9])
    config = {"task": "mrpc", "model": "m", "distributed": raw("auto", "auto"),
              "train": {"batch_size": 8, "max_seq_length": 64, "precision": "fp32"}}
    first = tune.measured_layout(config, data, 4, tmp_path, tmp_path / "cache")
    # one global batch for both layouts (8 = 8 x 1 = 4 x 2), 4 updates sampled after the warm-up
    assert bursts == [(1, 8, 1, 4), (2, 4, 1, 4)] and first["cached"] is False and first["steps"] == 4
    assert first["best"] == {"processes_per_node": 2, "threads_per_process": 1, "batch_size": 4,
                             "gradient_accumulation_steps": 1}
    assert first["warmup_steps"] == 3 and first["shape"]["lengths"] == {"mean": 5.7, "p10": 3, "p50": 5, "p90": 9,
                                                                        "max": 9}
    assert Path(first["cache_file"]).parent == tmp_path / "cache"
    again = tune.measured_layout(config, data, 4, tmp_path, tmp_path / "cache")
    assert len(bursts) == 2 and again["cached"] is True and again["table"] == first["table"]
    other = {**config, "train": {**config["train"], "batch_size": 16}}
    tune.measured_layout(other, data, 4, tmp_path, tmp_path / "cache")
    assert len(bursts) == 4  # another shape: its own burst
    tune.measured_layout(config, tokenized(tmp_path / "longer", [30, 50, 90]), 4, tmp_path, tmp_path / "cache")
    assert len(bursts) == 6  # other token lengths: another step
    tune.measured_layout(config, data, 4, tmp_path, tmp_path / "cache", fresh=True)
    assert len(bursts) == 8  # the tune target measures again


def tokenized(folder: Path, lengths: list[int]) -> str:
    rows = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in lengths]})
    datasets.DatasetDict({"train": rows}).save_to_disk(str(folder))
    return str(folder)


def test_environment_json_records_the_figures_of_a_measured_layout_only():
    info = {"node_reports": [{"node": "a", "cpu_model": "AMD EPYC 9B14"}, {"node": "b", "cpu_model": "Other"}]}
    measured = check.layout_record(layout.decide(dist("auto", "auto"), record(), 2), record(), info)
    assert measured["layout"]["source"] == "measured" and measured["layout"]["table"] == TABLE
    assert measured["layout_reason"].startswith("auto: 2 x 1")
    assert measured["layout_reason"].endswith("measured on AMD EPYC 9B14 but node(s) b have another CPU model")
    given = check.layout_record(layout.decide(dist(1, 2), None, 2), None, {"node_reports": []})
    assert given == {"layout": {"source": "set"}, "layout_reason": "processes_per_node 1 as set (no burst)"}
