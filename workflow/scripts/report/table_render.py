"""The accuracy table (glue_table.build) as Markdown, CSV and an HTML fragment.

A cell reads `87.1 ± 0.6 / 90.2 ± 0.4` (the task's metrics, mean ± std over
seeds, percent), then `lr 3e-5, n=3` (the rate chosen on dev and how many
seeds it has), then the published figure and our difference when the
experiment gives one. A cell without any finished run reads `—`.
"""

from __future__ import annotations

import csv
import html
import io

from workflow.scripts.settings.sweep import number
from workflow.scripts.report.glue_table import SHORT


def _pm(stats: dict) -> str:
    return f"{stats['mean']:.1f}" + ("" if stats["std"] is None else f" ± {stats['std']:.1f}")


def _published(pub: dict | None) -> str:
    if not pub:
        return ""
    parts = [f"{v['value']:g}" + ("" if v["diff"] is None else f" ({v['diff']:+.1f})") for v in pub.values()]
    return "paper " + " / ".join(parts)


def cell_lines(cell: dict | None) -> list[str]:
    """The lines of one cell: figures, rate and n, published figure."""
    if cell is None or cell["missing"]:
        n = f"n=0/{cell['planned']}" if cell else ""
        return ["—", n, _published(cell and cell.get("published"))]
    figures = " / ".join(_pm(cell["metrics"][m]) for m in cell["metrics"] if m != "score")
    n = f"n={cell['n']}" + ("" if cell["n"] == cell["planned"] else f"/{cell['planned']}")
    return [figures, f"lr {number(cell['learning_rate'])}, {n}", _published(cell.get("published"))]


def header(table: dict) -> list[str]:
    names = [f"{t.upper()} ({'/'.join(SHORT.get(m, m) for m in table['metrics'][t])})" for t in table["tasks"]]
    return ["model", *names, "GLUE score"]


def glue_lines(row: dict) -> list[str]:
    glue = row["glue"]
    if glue["score"] is None:
        return ["—", "", ""]
    return [f"{glue['score']:.1f}", f"{len(glue['tasks'])} tasks", _published(glue.get("published"))]


def markdown(table: dict, title: str = "") -> str:
    lines = [f"# {title}\n"] if title else []
    head = header(table)
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table["rows"]:
        cells = [cell_lines(row["cells"].get(t)) for t in table["tasks"]] + [glue_lines(row)]
        lines.append("| " + " | ".join([row["row"], *("<br>".join(filter(None, c)) for c in cells)]) + " |")
    lines.append("")
    lines.append("Mean ± std over seeds (percent) at the learning rate chosen on dev (best mean over seeds); "
                 "GLUE score = mean over the tasks present, two-metric tasks averaged first.")
    if table["note"]:
        lines.append(f"Note: {table['note']}.")
    return "\n".join(lines) + "\n"


def csv_text(table: dict) -> str:
    """One line per row, task and metric (score = the task's GLUE score)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["row", "task", "metric", "mean", "std", "n", "planned", "learning_rate", "published", "diff"])
    for row in table["rows"]:
        for task, cell in row["cells"].items():
            for metric in [*table["metrics"][task], "score"]:
                writer.writerow([row["row"], task, metric, *_csv_figures(cell, metric)])
        glue = row["glue"]
        pub = (glue.get("published") or {}).get("score") or {}
        writer.writerow([row["row"], "glue", "score", glue["score"], "", len(glue["tasks"]), "", "",
                         pub.get("value", ""), pub.get("diff", "")])
    return out.getvalue()


def _csv_figures(cell: dict, metric: str) -> list:
    pub = (cell.get("published") or {}).get(metric) or {}
    pub_cols = [pub.get("value", ""), "" if pub.get("diff") is None else pub["diff"]]
    if cell["missing"]:
        return ["", "", 0, cell["planned"], "", *pub_cols]
    stats = cell["metrics"][metric]
    std = "" if stats["std"] is None else stats["std"]
    return [stats["mean"], std, cell["n"], cell["planned"], number(cell["learning_rate"]), *pub_cols]


def html_table(table: dict) -> str:
    """The table as an HTML fragment with inline styles (report viewer and landing page)."""
    style = "border:1px solid #ccc;padding:4px 8px;text-align:center;vertical-align:top"
    head = "".join(f'<th style="{style}">{html.escape(h)}</th>' for h in header(table))
    body = []
    for row in table["rows"]:
        cells = [cell_lines(row["cells"].get(t)) for t in table["tasks"]] + [glue_lines(row)]
        tds = "".join(f'<td style="{style}">' + "<br>".join(html.escape(x) for x in c if x) + "</td>"
                      for c in cells)
        body.append(f'<tr><th style="{style}">{html.escape(row["row"])}</th>{tds}</tr>')
    note = f"<p>Note: {html.escape(table['note'])}.</p>" if table["note"] else ""
    return (f'<table id="cpuddp-glue-table" style="border-collapse:collapse"><tr>{head}</tr>'
            + "".join(body) + "</table>\n<p>Mean ± std over seeds (percent) at the learning rate chosen on dev; "
            "GLUE score = mean over the tasks present, two-metric tasks averaged first.</p>" + note + "\n")
