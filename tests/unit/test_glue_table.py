"""The accuracy table (report/glue_table.py): means and std over seeds, the
learning rate chosen on dev, GLUE's conventions for two-metric tasks, missing
cells and tasks, published figures beside the cells."""

from __future__ import annotations

import pytest

from workflow.scripts.settings.sweep import named_values
from workflow.scripts.report import glue_table, table_render

BASE = {"task": "mrpc", "model": "distilbert-base-uncased", "seed": 42, "learning_rate": 2e-5}
SWEEP = {"task": ["mrpc", "stsb", "cola"], "seed": [1, 2, 3], "learning_rate": [3e-5, 2e-5]}


def metrics(task: str, lr: float, seed: int) -> dict:
    """Made-up dev results: 3e-5 is better on mrpc, 2e-5 on stsb and cola."""
    better = (lr == 3e-5) == (task == "mrpc")
    x = (0.80 if better else 0.70) + 0.01 * seed
    return {"mrpc": {"f1": x + 0.05, "accuracy": x}, "stsb": {"pearson": x, "spearmanr": x - 0.02},
            "cola": {"matthews_correlation": x - 0.3}}[task]


def results(planned: dict, skip=()) -> dict:
    return {run: metrics(v["task"], v["learning_rate"], v["seed"]) for run, v in planned.items() if run not in skip}


def test_cells_are_mean_and_std_over_seeds_at_the_rate_chosen_on_dev():
    planned = named_values(SWEEP)
    table = glue_table.build(planned, results(planned), BASE)
    assert table["tasks"] == ["cola", "mrpc", "stsb"]  # GLUE's column order
    (row,) = table["rows"]
    assert row["row"] == "distilbert-base-uncased"
    mrpc, stsb = row["cells"]["mrpc"], row["cells"]["stsb"]
    assert mrpc["learning_rate"] == 3e-5 and stsb["learning_rate"] == 2e-5
    assert mrpc["n"] == 3 and mrpc["metrics"]["f1"] == {"mean": 87.0, "std": 1.0}
    assert mrpc["metrics"]["accuracy"]["mean"] == 82.0
    assert [s["seed"] for s in mrpc["seeds"]] == [1, 2, 3]


def test_glue_score_averages_two_metric_tasks_first():
    planned = named_values(SWEEP)
    row = glue_table.build(planned, results(planned), BASE)["rows"][0]
    mrpc = (87.0 + 82.0) / 2
    stsb = (82.0 + 80.0) / 2
    cola = 52.0
    assert row["cells"]["mrpc"]["metrics"]["score"]["mean"] == pytest.approx(mrpc)
    assert row["glue"]["score"] == pytest.approx((mrpc + stsb + cola) / 3, abs=0.01)
    assert row["glue"]["missing"] == ["sst2", "qqp", "mnli", "qnli", "rte", "wnli"]


def test_mnli_counts_matched_and_mismatched_as_its_two_metrics():
    planned = named_values({"task": ["mnli"], "seed": [1]})
    table = glue_table.build(planned, {"mnli-s1": {"accuracy": 0.8, "accuracy_mm": 0.82}}, BASE)
    cell = table["rows"][0]["cells"]["mnli"]
    assert cell["metrics"]["score"]["mean"] == 81.0 and cell["metrics"]["accuracy"]["std"] is None


def test_missing_runs_and_tasks_are_marked():
    planned = named_values(SWEEP)
    skip = [r for r in planned if r.startswith("cola")] + ["mrpc-s3-lr3e-5"]
    table = glue_table.build(planned, results(planned, skip), BASE)
    row = table["rows"][0]
    assert row["cells"]["cola"]["missing"] and row["cells"]["cola"]["planned"] == 3
    assert row["cells"]["mrpc"]["n"] == 2 and row["cells"]["mrpc"]["planned"] == 3
    assert "cola" in row["glue"]["missing"]
    assert "7 runs have no result" in table["note"] and "missing: sst2" in table["note"]
    text = table_render.markdown(table)
    assert "n=0/3" in text and "n=2/3" in text and "—" in text


def test_one_row_per_model_and_published_figures_beside_the_cells():
    sweep = {"model": ["distilbert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2"],
             "task": ["rte"], "seed": [1, 2]}
    planned = named_values(sweep)
    assert list(planned)[0] == "distilbert-base-uncased-rte-s1"
    found = {r: {"accuracy": 0.6 + 0.02 * v["seed"]} for r, v in planned.items()}
    published = {"source": "x", "table": {"distilbert-base-uncased": {"rte": 59.9, "score": 77.0}}}
    table = glue_table.build(planned, found, BASE, published)
    assert [r["row"] for r in table["rows"]] == ["distilbert-base-uncased", "all-minilm-l6-v2"]
    pub = table["rows"][0]["cells"]["rte"]["published"]
    assert pub == {"score": {"value": 59.9, "diff": 3.1}}
    assert table["rows"][0]["glue"]["published"]["score"]["value"] == 77.0
    assert table["rows"][1]["cells"]["rte"]["published"] is None
    assert "paper 59.9 (+3.1)" in table_render.markdown(table)
    lines = table_render.csv_text(table).splitlines()
    assert lines[0].startswith("row,task,metric,mean,std,n")
    assert "distilbert-base-uncased,rte,accuracy,63.0,1.41,2,2,2e-5,," in lines


def test_the_table_is_for_sweeps_over_task_or_seed():
    assert glue_table.wanted({"seed": [1, 2]}) and glue_table.wanted({"task": ["rte"]})
    assert not glue_table.wanted({"nodes": [1, 2]}) and not glue_table.wanted({})
