"""Report step: the tables and charts of an experiment, from its summary.

Writes into --out-dir (the rule marks each for `snakemake --report`):
summary.html (every run), scaling.png (measured speedup against ideal and
published), loss.png (all runs) and loss/<run>.png, quantization.html (fp32
against int8), environment.html (the machine and software of each run),
tries.html (each run's tries: outcome, error, resumed step, nodes, log
folder) and overview.html (the landing page: runs table, both charts
embedded, tries). A try's log folder is a link relative to the report
folder: it opens where the files are (the HTML in results/<experiment>/
report/); Snakemake's report.html embeds only the files marked report(),
not the logs, so there the path is what tells where to look.
HTML files are fragments with inline styles, so that they read the same in
the report's viewer and inside its landing page. The tables are made in
tables.py, the charts in charts.py; this module reads and writes.
"""

from __future__ import annotations

import argparse
import base64
from pathlib import Path

from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import run_cli
from workflow.scripts.report.charts import plot_loss, plot_losses, plot_scaling
from workflow.scripts.report.runs import read_environment, read_train_metrics
from workflow.scripts.report.tables import environment_table, quantization_table, summary_table, tries_table


def write_report(summary: dict, settings: dict, results: Path, out_dir: Path) -> list[Path]:
    """Every table and chart of the experiment; returns the files written."""
    entries = summary["runs"]
    trains = {e["run"]: read_train_metrics(results / e["run"]) for e in entries}
    envs = {e["run"]: read_environment(results / e["run"]) for e in entries}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    tries = "".join(tries_table(e, str(out_dir)) for e in entries)
    for name, text in (("summary.html", summary_table(summary)),
                       ("quantization.html", quantization_table(entries)),
                       ("environment.html", environment_table(envs)),
                       ("tries.html", tries)):
        (out_dir / name).write_text(text)
        written.append(out_dir / name)
    plot_scaling(entries, settings.get("published"), out_dir / "scaling.png")
    plot_losses(trains, out_dir / "loss.png")
    written += [out_dir / "scaling.png", out_dir / "loss.png"]
    for name, train in trains.items():
        plot_loss(name, train, out_dir / "loss" / f"{name}.png")
        written.append(out_dir / "loss" / f"{name}.png")
    (out_dir / "overview.html").write_text(overview(summary, out_dir, tries))
    return written + [out_dir / "overview.html"]


def overview(summary: dict, out_dir: Path, tries: str = "") -> str:
    """The report's landing page: the runs table, both charts (embedded)
    and each run's tries."""
    parts = [summary_table(summary)]
    for name, alt in (("scaling.png", "scaling chart"), ("loss.png", "loss chart")):
        data = base64.b64encode((out_dir / name).read_bytes()).decode()
        parts.append(f'<p><img id="cpuddp-{name[:-4]}" alt="{alt}" src="data:image/png;base64,{data}"'
                     ' style="max-width:100%"></p>\n')
    return "".join(parts) + tries


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", required=True, help="summary.json of the experiment")
    parser.add_argument("--config", required=True, help="report settings JSON (published figures)")
    parser.add_argument("--results", required=True, help="results/<experiment> folder (the run folders)")
    parser.add_argument("--out-dir", required=True, help="where the tables and charts go")
    args = parser.parse_args(argv)
    written = write_report(read_json(args.summary), read_json(args.config), Path(args.results), Path(args.out_dir))
    print(f"report: {len(written)} files in {args.out_dir}")


if __name__ == "__main__":
    run_cli(main)
