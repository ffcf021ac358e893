"""processes_per_node auto through the real workflow on this machine, with
the tiny model: the first run bursts every ranks x threads split of the
cores (2 x 1 and 1 x 2 on 2 cores) at the run's global batch and records the
faster with both figures; the next run of the same shape takes the cached
layout with no burst; a number wins with no burst at all. A burst that
fails (rank 1 killed, CPUDDP_FAULT) drops its layout and the run trains;
two layouts forced through the cache train the same global batch and steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from helpers.workflow import snakemake, tiny_experiment, write_config
from workflow.scripts.settings import layout
from workflow.scripts.train import tune
from workflow.scripts.train.step_phases import WARMUP_STEPS

RUN = Path("results/tiny/default")
TRAINED = str(RUN / "train_metrics.json")


def experiment(work: Path, model: Path, **distributed) -> Path:
    config = yaml.safe_load(tiny_experiment(work, model).read_text())
    config["distributed"] = distributed
    return write_config(work / "tiny.yaml", config)


def environment(work: Path) -> dict:
    return json.loads((work / RUN / "environment.json").read_text())


def test_auto_measures_once_then_uses_the_cache_and_a_number_wins(tmp_path, tiny_model_dir, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(layout.CACHE_ENV, str(cache))  # the workflow's jobs inherit it
    configfile = experiment(tmp_path, tiny_model_dir)  # processes_per_node: auto, the default
    first = snakemake(tmp_path, configfile, str(RUN / "environment.json"))
    assert "ranks x threads measured (processes_per_node auto" in first.stderr  # the run line

    info = environment(tmp_path)
    record = info["layout"]
    assert record["source"] == "measured" and record["cached"] is False and record["steps"] == tune.AUTO_STEPS
    assert record["warmup_steps"] == 3 and record["dropped"] == []
    # both at the global batch of one rank of batch 8: 8 x 1 and 4 x 2
    assert {(r["processes_per_node"], r["batch_size"], r["gradient_accumulation_steps"]) for r in record["table"]} \
        == {(1, 8, 1), (2, 4, 1)}
    rows = {(r["processes_per_node"], r["threads_per_process"]): r["train_samples_per_second"]
            for r in record["table"]}
    assert list(rows) == layout.layouts(record["cores"]) and all(rate > 0 for rate in rows.values())
    faster = max(rows, key=rows.get)
    assert (info["processes_per_node"], info["threads_per_process"]) == faster == \
        (record["best"]["processes_per_node"], record["best"]["threads_per_process"])
    assert info["layout_reason"].startswith(f"auto: {faster[0]} x {faster[1]} (ranks x threads)")
    assert all(f"{r} x {t}" in info["layout_reason"] for r, t in rows)  # every layout's figure
    assert record["cpu_model"] in info["layout_reason"]
    assert [p.name for p in cache.iterdir()] == [Path(record["cache_file"]).name]
    assert not (tmp_path / RUN / "bursts").exists()

    # Measured again (its layout.json and environment.json gone): the cache answers, with no burst.
    for made in ("layout.json", "environment.json"):
        (tmp_path / RUN / made).unlink()
    snakemake(tmp_path, configfile, str(RUN / "environment.json"))
    again = environment(tmp_path)
    assert again["layout"]["source"] == "cached" and again["layout"]["table"] == record["table"]
    assert again["processes_per_node"] == info["processes_per_node"]
    log = (tmp_path / "logs/measure_layout/tiny/default.log").read_text()
    assert "rank(s) x" not in log, log  # tune.py names each burst it runs

    # A number wins: no layout job, the layout as set.
    (tmp_path / RUN / "layout.json").unlink()
    slower = min(rows, key=rows.get)
    set_by_hand = experiment(tmp_path, tiny_model_dir, processes_per_node=slower[0])
    done = snakemake(tmp_path, set_by_hand, str(RUN / "environment.json"))
    assert "measure_layout" not in done.stderr and not (tmp_path / RUN / "layout.json").exists()
    given = environment(tmp_path)
    assert given["processes_per_node"] == slower[0] and given["layout"] == {"source": "set"}
    assert given["layout_reason"] == f"processes_per_node {slower[0]} as set (no burst)"


def test_a_failed_burst_drops_its_layout_and_two_forced_layouts_train_one_recipe(tmp_path, tiny_model_dir,
                                                                                 monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv(layout.CACHE_ENV, str(cache))
    configfile = experiment(tmp_path, tiny_model_dir)  # processes_per_node: auto; batch 8, 2 epochs
    with monkeypatch.context() as patch:
        patch.setenv("CPUDDP_FAULT", "final-save:1")  # rank 1 dies: the 2 x 1 burst fails, the 1 x 2 one cannot
        snakemake(tmp_path, configfile, TRAINED)
    info = environment(tmp_path)
    assert info["layout"]["source"] == "measured" and info["processes_per_node"] == 1
    assert [line.split(" (")[0] for line in info["layout"]["dropped"]] == ["2 x 1: its burst failed"]
    assert "dropped: 2 x 1: its burst failed" in info["layout_reason"]
    log = (tmp_path / "logs/measure_layout/tiny/default.log").read_text()
    assert "tune: 2 x 1: its burst failed" in log and "rank 1" in log
    one = json.loads((tmp_path / TRAINED).read_text())
    assert (one["world_size"], one["batch_size_per_rank"], one["gradient_accumulation_steps"]) == (1, 8, 1)

    # Forced to 2 x 1 through the cache entry the first run wrote: the same recipe, split in two.
    entry = next(cache.iterdir())
    record = json.loads(entry.read_text())
    forced = {"processes_per_node": 2, "threads_per_process": 1, "batch_size": 4, "gradient_accumulation_steps": 1}
    record.update(best=forced, table=record["table"] + [{**forced, "train_samples_per_second": 1e6}])
    entry.write_text(json.dumps(record))
    for made in ("layout.json", "environment.json", "train_metrics.json"):
        (tmp_path / RUN / made).unlink()
    snakemake(tmp_path, configfile, TRAINED)
    assert environment(tmp_path)["layout"]["source"] == "cached"
    two = json.loads((tmp_path / TRAINED).read_text())
    assert (two["world_size"], two["batch_size_per_rank"], two["gradient_accumulation_steps"]) == (2, 4, 1)
    assert two["global_batch"] == one["global_batch"] == 8
    assert two["steps"] == one["steps"] == 2 * one["steps_per_epoch"] and one["steps_per_epoch"] > 1
    for rank in two["ranks"]:  # each rank's own split of its updates after the warm-up (train/step_phases.py)
        split = rank["step_phases"]
        assert split["updates"] == two["steps"] - WARMUP_STEPS > 0
        assert min(split["phases"].values()) >= 0 and split["phases"]["allreduce_exposed"] > 0
        assert sum(split["phases"].values()) == pytest.approx(split["update_seconds"], rel=0.01)
    assert "rank 0's update: " in (tmp_path / "logs/train_ddp/tiny/default.log").read_text()
