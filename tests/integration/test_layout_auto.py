"""processes_per_node auto through the real workflow on this machine, with
the tiny model: the first run bursts every ranks x threads split of the
cores (2 x 1 and 1 x 2 on 2 cores) at the run's batch and records the
faster with both figures; the next run of the same shape takes the cached
layout with no burst; a number wins with no burst at all."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from helpers.workflow import snakemake, tiny_experiment, write_config
from workflow.scripts.settings import layout
from workflow.scripts.train import tune

RUN = Path("results/tiny/default")


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
    rows = {(r["processes_per_node"], r["threads_per_process"]): r["train_samples_per_second"]
            for r in record["table"]}
    assert list(rows) == tune.layouts(record["cores"]) and all(rate > 0 for rate in rows.values())
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
