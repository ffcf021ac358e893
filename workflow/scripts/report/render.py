"""Report step: the tables and charts of an experiment, from its summary.

Writes results/<experiment>/report.html (--page, page.py: the report every
run leaves) and into --out-dir (the rule marks each for `snakemake --report`):
summary.html (every run), scaling.png (measured speedup against ideal and
published; with two runs or more only), evaluation.png (evaluation during
training, where a run has it), loss.png (all runs) and loss/<run>.png, quantization.html (fp32
against int8), environment.html (the machine and software of each run),
tries.html (each run's tries: outcome, error, resumed step, nodes, log
folder) and overview.html (the landing page of Snakemake's report: runs table, the
charts embedded, tries). A try's log folder is a link relative to the report
folder: it opens where the files are (the HTML in results/<experiment>/
report/); Snakemake's report.html embeds only the files marked report(),
not the logs, so there the path is what tells where to look.
HTML files are fragments with inline styles, so that they read the same in
the report's viewer and inside its landing page. The tables are made in
tables.py, the charts in charts.py; this module reads and writes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import run_cli
from workflow.scripts.report.charts import evaluated, plot_evaluation, plot_loss, plot_losses, plot_scaling
from workflow.scripts.report.page import image, render_page
from workflow.scripts.report.runs import read_environment, read_train_metrics
from workflow.scripts.report.tables import environment_table, quantization_table, summary_table, tries_table


def write_report(summary: dict, settings: dict, results: Path, out_dir: Path, page: Path | None = None) -> list[Path]:
    """Every table and chart of the experiment, and the page when asked; returns the files written."""
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
    drawn = charts(entries, settings, trains, out_dir)
    written += drawn
    for name, train in trains.items():
        plot_loss(name, train, out_dir / "loss" / f"{name}.png")
        written.append(out_dir / "loss" / f"{name}.png")
    (out_dir / "overview.html").write_text(overview(summary, drawn, tries))
    written.append(out_dir / "overview.html")
    if page is not None:
        page.write_text(render_page(summary, settings, envs, drawn, page))
        written.append(page)
    return written


def charts(entries: list[dict], settings: dict, trains: dict, out_dir: Path) -> list[Path]:
    """The charts that say something: scaling with two runs or more (one run's
    speedup over itself is 1.00x), the evaluations where a run has them, the
    loss. A chart that an earlier version of the experiment had goes."""
    for name in ("scaling.png", "evaluation.png"):
        (out_dir / name).unlink(missing_ok=True)
    drawn = []
    if len(entries) > 1:
        plot_scaling(entries, settings.get("published"), out_dir / "scaling.png")
        drawn.append(out_dir / "scaling.png")
    if evaluated(entries):
        plot_evaluation(entries, out_dir / "evaluation.png")
        drawn.append(out_dir / "evaluation.png")
    plot_losses(trains, out_dir / "loss.png")
    return drawn + [out_dir / "loss.png"]


def overview(summary: dict, drawn: list[Path], tries: str = "") -> str:
    """The landing page of Snakemake's report: the runs table, the charts
    (embedded) and each run's tries."""
    return summary_table(summary) + "".join(f"<p>{image(path)}</p>\n" for path in drawn) + tries


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", required=True, help="summary.json of the experiment")
    parser.add_argument("--config", required=True, help="report settings JSON (published figures)")
    parser.add_argument("--results", required=True, help="results/<experiment> folder (the run folders)")
    parser.add_argument("--out-dir", required=True, help="where the tables and charts go")
    parser.add_argument("--page", help="where the report page goes (results/<experiment>/report.html)")
    args = parser.parse_args(argv)
    written = write_report(read_json(args.summary), read_json(args.config), Path(args.results), Path(args.out_dir),
                           Path(args.page) if args.page else None)
    print(f"report: {len(written)} files in {args.out_dir}")


if __name__ == "__main__":
    run_cli(main)
