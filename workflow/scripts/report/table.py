"""Report step: the accuracy table of a sweep over task or seed.

    python -m workflow.scripts.report.table --config results/E/config/report.json \
        --results results/E [--summary results/E/summary.json] --out-dir results/E/report

Writes results/E/table.md and table.csv, and into --out-dir table.html and
seeds.png (each seed's score per task) for the HTML report. Without
--summary it reads whatever run folders have an evaluation, so that after an
interrupted sweep the table is rebuilt from the runs that exist, the others
marked missing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import run_cli
from workflow.scripts.settings.sweep import named_values
from workflow.scripts.report import glue_table, table_render
from workflow.scripts.report.charts import plot_seeds


def sweep_of(settings: dict) -> dict:
    """The sweep in its own key order (run names follow it; the JSON file sorts keys)."""
    sweep = settings.get("sweep") or {}
    return {k: sweep[k] for k in settings.get("sweep_order") or sweep}


def base_of(settings: dict) -> dict:
    """What runs that do not sweep a key share: the experiment's own values."""
    train = settings.get("train") or {}
    return {"task": settings["task"], "model": settings["model"], "seed": train.get("seed"),
            "learning_rate": train.get("learning_rate")}


def from_summary(settings: dict, summary: dict) -> dict:
    """The table of a finished sweep (summary.json's runs)."""
    results = {e["run"]: (e.get("eval") or {}).get("fp32") for e in summary["runs"]}
    return make(settings, results)


def from_folders(settings: dict, results_dir: Path) -> dict:
    """The table of the runs that have an evaluation so far."""
    planned = named_values(sweep_of(settings))
    found = {run: read_json(results_dir / run / "eval_fp32.json") for run in planned
             if (results_dir / run / "eval_fp32.json").is_file()}
    return make(settings, found)


def make(settings: dict, results: dict) -> dict:
    planned = named_values(sweep_of(settings))
    return glue_table.build(planned, results, base_of(settings), settings.get("published"))


def write(table: dict, title: str, results_dir: Path, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {results_dir / "table.md": table_render.markdown(table, title),
             results_dir / "table.csv": table_render.csv_text(table),
             out_dir / "table.html": table_render.html_table(table)}
    for path, text in files.items():
        path.write_text(text)
    plot_seeds(table, out_dir / "seeds.png")
    return [*files, out_dir / "seeds.png"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="report settings JSON (sweep, published figures)")
    parser.add_argument("--results", required=True, help="results/<experiment> folder")
    parser.add_argument("--summary", help="summary.json (else: the run folders found)")
    parser.add_argument("--out-dir", required=True, help="where table.html and seeds.png go")
    args = parser.parse_args(argv)
    settings, results_dir = read_json(args.config), Path(args.results)
    table = (from_summary(settings, read_json(args.summary)) if args.summary
             else from_folders(settings, results_dir))
    write(table, f"{settings['experiment']}: dev results", results_dir, Path(args.out_dir))
    print(table_render.markdown(table))


if __name__ == "__main__":
    run_cli(main)
