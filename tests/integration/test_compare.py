"""compare: two experiments side by side and against their published
figures; the `published:` block of experiment files; the experiment files."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers.workflow import REPO
from helpers.sweep import EXPERIMENT
from workflow.scripts.report import compare
from workflow.scripts.settings import config as cfg
from workflow.scripts.common.atomic import write_json
from workflow.scripts.common.errors import UserError


def entry(run, seconds, speedup, f1):
    return {"run": run, "world_size": 1, "threads_per_process": 1, "backend": "gloo", "precision": "fp32",
            "train_seconds": seconds, "train_samples_per_second": 100 / seconds, "speedup": speedup,
            "eval": {"fp32": {"f1": f1, "samples_per_second": 9.0}, "int8": None}}


def table(text: str) -> dict[tuple[str, str], list[str]]:
    """(run, field) -> the other cells of the Markdown table."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    return {(r[0], r[1]): r[2:] for r in rows[1:]}


def side(name, runs, figures=None):
    published = {"source": "a paper", "figures": figures} if figures is not None else None
    return compare.Side(name, {"experiment": name, "baseline": runs[0]["run"], "runs": runs}, published)


def test_two_experiments_side_by_side_by_run_name():
    a = side("a", [entry("n1", 100.0, 1.0, 0.8), entry("n2", 60.0, 1.667, 0.81)], {"n2": {"speedup": 1.7}})
    b = side("b", [entry("n1", 80.0, 1.0, 0.79), entry("n2", 50.0, 1.6, 0.8)])
    rows = table(compare.compare(a, b))
    assert rows[("n2", "speedup")] == ["1.667", "1.7", "1.6", "", "0.96x"]
    assert rows[("n1", "train seconds")] == ["100", "", "80", "", "0.80x"]
    assert rows[("n2", "eval fp32 f1")][0] == "0.81"
    assert ("n1", "eval int8 f1") not in rows  # nobody has it


def test_runs_without_common_names_pair_by_position():
    a = side("a", [entry("default", 100.0, 1.0, 0.8)])
    b = side("b", [entry("n1", 50.0, 1.0, 0.8), entry("n2", 30.0, 1.6, 0.8)])
    rows = table(compare.compare(a, b))
    assert rows[("default / n1", "train seconds")][-1] == "0.50x"
    assert ("— / n2", "speedup") in rows


def test_one_experiment_against_its_published_figures():
    a = side("blog", [entry("n1", 480.0, 1.0, 0.8), entry("n2", 300.0, 1.6, 0.8)],
             {"n1": {"train_seconds": 466}, "n2": {"train_seconds": 279, "speedup": 1.7}})
    text = compare.compare(a)
    assert "published: a paper" in text
    rows = table(text)
    assert rows[("n2", "speedup")] == ["1.6", "1.7", "0.94x"]
    assert rows[("n1", "train seconds")] == ["480", "466", "1.03x"]


def test_published_figures_alone_when_not_run(tmp_path):
    experiments, results = tmp_path / "experiments", tmp_path / "results"
    experiments.mkdir()
    (experiments / "paper.yaml").write_text(yaml.safe_dump({
        "experiment": "paper", "task": "mrpc", "model": "m", "sweep": {"nodes": [1, 2]},
        "published": {"source": "a blog", "figures": {"n2": {"speedup": 1.7}}}}))
    loaded = compare.load_side("paper", results, experiments)
    assert loaded.summary is None and loaded.runs() == ["n2"]
    text = compare.compare(loaded)
    assert "not run yet" in text and table(text)[("n2", "speedup")] == ["", "1.7", ""]


def test_load_side_from_results_folder_and_summary(tmp_path):
    summary = {"experiment": "x", "baseline": "default", "runs": [entry("default", 10.0, 1.0, 0.5)]}
    write_json(tmp_path / "results/x/summary.json", summary)
    for spec in ("x", str(tmp_path / "results/x"), str(tmp_path / "results/x/summary.json")):
        loaded = compare.load_side(spec, tmp_path / "results", tmp_path / "experiments")
        assert loaded.name == "x" and loaded.runs() == ["default"]


def test_unknown_experiment_says_what_to_give(tmp_path):
    with pytest.raises(UserError, match="no experiment 'nope'.*experiments/nope.yaml"):
        compare.load_side("nope", tmp_path / "results", tmp_path / "experiments")


def test_compare_the_workflow_sweep_with_its_published_figures(sweep_run, tmp_path):
    work, configfile = sweep_run
    out = tmp_path / "compare.md"
    compare.main([str(configfile), "--results", str(work / "results"), "--out", str(out)])
    rows = table(out.read_text())
    measured, published, ratio = rows[("ppn2", "speedup")]
    assert float(measured) > 0 and published == "1.8" and ratio.endswith("x")
    assert rows[("ppn1", "ranks")][0] == "1" and rows[("ppn2", "ranks")][0] == "2"
    assert f"- {EXPERIMENT}: baseline run ppn1" in out.read_text()


def test_make_compare_calls_the_compare_step():
    done = subprocess.run(["make", "-n", "-C", str(REPO), "compare", "A=demo", "B=demo-sweep"],
                          capture_output=True, text=True, timeout=60)
    assert "-m workflow.scripts.report.compare --cluster-profile profiles/local demo demo-sweep" in done.stdout, \
        done.stdout + done.stderr


# ------------------------------------------------------- published: schema

def base_config(**extra):
    return {"experiment": "x", "task": "mrpc", "model": "m", **extra}


def test_published_block_is_accepted_free_form():
    published = {"source": "blog", "notes": "anything", "figures": {"n1": {"train_seconds": 466}}}
    assert cfg.validate(base_config(published=published))["published"] == published


@pytest.mark.parametrize("published, message", [
    ({"figures": {}}, "published: 'source' is a required property"),
    ({"source": "b", "figures": {"n1": {"speedup": "1.7x"}}},
     "published.figures.n1.speedup: '1.7x' is not of type 'number'"),
])
def test_bad_published_block_is_one_clear_line(published, message):
    with pytest.raises(cfg.ConfigError, match=re.escape(message)):
        cfg.validate(base_config(published=published))


# ------------------------------------------------------- experiment files

EXPERIMENT_FILES = sorted(p for p in (REPO / "experiments").glob("*.yaml") if p.name != "demo.yaml")


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: p.name)
def test_experiment_files_name_source_and_profile(path: Path):
    text = path.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert re.search(r"--profile profiles/(local|xeon|slurm)", header), f"{path.name}: which profile?"
    config = cfg.validate(yaml.safe_load(text))
    assert config["experiment"] == path.stem
    runs = cfg.runs(config)
    for run in (config.get("published") or {}).get("figures", {}):
        assert run in runs, f"{path.name}: published figures for unknown run {run}"
    if not path.name.startswith("demo"):
        assert config["published"]["source"], f"{path.name}: name the source"
