"""results/<experiment>/report.html: the experiment's report as one
self-contained page, written by every `snakemake` run (rule report_summary).

It opens on the answer: one row per run with its dev metrics (fp32 and int8),
training samples/s, what deploy/ holds and why, and how the layout and the
precision were decided, all inside the first screen of a 1280 x 800 window.
Then the charts that say something (the evaluation during training where
there is one, the scaling chart only with two runs or more, the loss), then
every table in full. Charts are embedded, so the file works offline and can
be mailed; Snakemake's own `--report` shows the same files with its menu.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from workflow.scripts.common import card
from workflow.scripts.report.numbers import figure
from workflow.scripts.report.tables import (environment_table, metric_names, quantization_table, summary_table,
                                            tries_table)

# Long decisions (a deploy verdict, a layout's measurements) are cut to this many lines in
# the answer; the whole text is in the cell's tooltip and in the tables below.
CLAMP = "display:-webkit-box;-webkit-line-clamp:3;-webkit-box-orient:vertical;overflow:hidden"
STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:12px 16px;color:#0f172a}
h1{font-size:18px;margin:0 0 2px 0} h2{font-size:15px;margin:18px 0 4px 0}
.lead{color:#475569;margin:0 0 8px 0}
#cpuddp-answer{border-collapse:collapse;width:100%;table-layout:fixed}
#cpuddp-answer th,#cpuddp-answer td{border:1px solid #cbd5e1;padding:3px 6px;vertical-align:top;text-align:left}
#cpuddp-answer th{background:#f1f5f9}
.figure{font-weight:600} .why{color:#475569;font-size:12px}
.charts img{margin:0 12px 8px 0;vertical-align:top}
"""
# Column widths of the answer table (%): the decisions' text needs the most room.
COLUMNS = (("run", 8), ("dev fp32", 14), ("dev int8", 14), ("training samples/s", 9), ("deployed", 19),
           ("layout", 19), ("precision", 17))


def metrics_text(evaluation: dict | None, names: list[str]) -> str:
    """'accuracy 0.878, f1 0.917' of one evaluation."""
    return ", ".join(f"{m} {figure(evaluation.get(m))}" for m in names if m in evaluation)


def cell(kind: str, run: str, main: str, why: str = "") -> str:
    """One answer cell: its figure, and under it the reason (clamped; whole in the tooltip).
    data-run / data-figure name it for the browser test of the first screen."""
    reason = (f'<div class="why" style="{CLAMP}" title="{html.escape(why)}">{html.escape(why)}</div>'
              if why else "")
    return (f'<td data-run="{html.escape(run)}" data-figure="{kind}"><span class="figure">{html.escape(main)}'
            f"</span>{reason}</td>")


def int8_cell(entry: dict, names: list[str]) -> str:
    int8 = entry["eval"].get("int8")
    if int8:
        return cell("int8", entry["run"], metrics_text(int8, names))
    why = (entry.get("quantization") or {}).get("reason") or "quantization.enabled false"
    return cell("int8", entry["run"], "not quantized", why)


def deploy_cell(entry: dict) -> str:
    deploy = entry.get("deploy") or {}
    return cell("deployed", entry["run"], deploy.get("label") or deploy.get("candidate") or "nothing deployed",
                deploy.get("why") or "")


def layout_cell(entry: dict, env: dict) -> str:
    layout = (f"{entry['nodes']} node(s) x {entry['processes_per_node']} rank(s) x "
              f"{entry['threads_per_process']} thread(s), {entry['backend']}")
    why = env.get("layout_reason") or "as set in the experiment"
    return cell("layout", entry["run"], layout, why)


def answer_table(summary: dict, envs: dict[str, dict]) -> str:
    """The first screen: per run, what came out and why."""
    entries = summary["runs"]
    fp32, int8 = metric_names(entries, "fp32"), metric_names(entries, "int8") or metric_names(entries, "fp32")
    cols = "".join(f'<col style="width:{w}%">' for _, w in COLUMNS)
    head = "".join(f"<th>{name}</th>" for name, _ in COLUMNS)
    rows = []
    for e in entries:
        env = envs.get(e["run"], {})
        rows.append("<tr>" + cell("run", e["run"], e["run"])
                    + cell("fp32", e["run"], metrics_text(e["eval"].get("fp32") or {}, fp32))
                    + int8_cell(e, int8)
                    + cell("samples", e["run"], figure(e["train_samples_per_second"]))
                    + deploy_cell(e) + layout_cell(e, env)
                    + cell("precision", e["run"], e["precision"], env.get("precision_reason") or "") + "</tr>")
    return (f'<table id="cpuddp-answer"><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>\n")


def image(path: Path) -> str:
    """A chart embedded (the page works offline), named for readers and
    tests: <img id="cpuddp-loss" alt="loss chart">."""
    data = base64.b64encode(path.read_bytes()).decode()
    return (f'<img id="cpuddp-{path.stem}" alt="{path.stem} chart" src="data:image/png;base64,{data}"'
            ' style="max-width:100%">')


def render_page(summary: dict, settings: dict, envs: dict[str, dict], drawn: list[Path], page: Path) -> str:
    """The whole page: `drawn` are the charts (render.charts draws only those
    that say something), `page` is where it goes (the tries link log folders from there)."""
    entries = summary["runs"]
    title = html.escape(f"cpuddp: {summary['experiment']}")
    model = card.base_model(str(settings.get("model")))  # the packaged MiniLM by its Hub id, as the model card names it
    lead = html.escape(f"{model} fine-tuned on {settings.get('task')}: {len(entries)} run(s). "
                       "Dev metrics of the validation split; deployed = what deploy/ holds.")
    tries = "".join(tries_table(e, str(page.parent)) for e in entries)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"<style>{STYLE}</style></head><body>\n<h1>{title}</h1><p class=\"lead\">{lead}</p>\n"
            + answer_table(summary, envs)
            + f'<h2>Charts</h2><div class="charts">{"".join(image(path) for path in drawn)}</div>\n'
            + "<h2>Runs</h2>" + summary_table(summary)
            + "<h2>Inference: fp32 against int8</h2>" + quantization_table(entries)
            + "<h2>Tries</h2>" + tries
            + "<h2>Environment</h2>" + environment_table(envs)
            + "</body></html>\n")
