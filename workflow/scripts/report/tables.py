"""The report's HTML tables: every run, the three inference models of each
run side by side (eager fp32, OpenVINO fp32 and int8), each run's
environment, and each run's tries.

Tables are fragments with inline styles, so that they read the same in the
report's viewer and inside its landing page (overview.html).
"""

from __future__ import annotations

import datetime
import html
import os

from workflow.scripts.common.candidates import CANDIDATES, LABELS
from workflow.scripts.report.numbers import figure, is_number, percent, ratio

# Numeric eval fields that are not task metrics (the quantization table shows speed on its own).
NOT_METRICS = ("samples", "samples_per_second", "latency_ms_p50", "latency_ms_p99", "speedup_vs_eager",
               "speedup_vs_fp32_same_runtime")
CELL = "border:1px solid #cbd5e1;padding:3px 8px;text-align:right;white-space:nowrap"
HEAD = CELL + ";background:#f1f5f9;text-align:center"
TABLE = "border-collapse:collapse;font:13px/1.4 system-ui,sans-serif;margin:4px 0 12px 0"


# --------------------------------------------------------------- formatting

def duration(seconds) -> str:
    """Train time as h:mm:ss, which reads faster than seconds."""
    return "—" if seconds is None else str(datetime.timedelta(seconds=round(seconds)))


class Link(str):
    """A cell whose text links to `href` (a path relative to the table's file)."""

    def __new__(cls, text: str, href: str):
        cell = super().__new__(cls, text)
        cell.href = href
        return cell


def html_table(table_id: str, header: list[str], rows: list[list[str]], caption: str = "") -> str:
    """An inline-styled HTML table; cells are escaped here."""
    head = "".join(f'<th style="{HEAD}">{html.escape(h)}</th>' for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td style="{_cell_style(str(c))}">{_content(c)}</td>' for c in row) + "</tr>"
        for row in rows)
    cap = f'<caption style="text-align:left;font-weight:600">{html.escape(caption)}</caption>' if caption else ""
    return (f'<div style="overflow-x:auto"><table id="{table_id}" style="{TABLE}">{cap}'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>\n")


def _content(cell) -> str:
    if isinstance(cell, Link):
        return f'<a href="{html.escape(cell.href)}">{html.escape(str(cell))}</a>'
    return html.escape(str(cell))


def _cell_style(text: str) -> str:
    """Numbers stay on one line, right-aligned; long text wraps."""
    return CELL if len(text) <= 40 else CELL + ";white-space:normal;text-align:left;min-width:24em"


def metric_names(entries: list[dict], precision: str) -> list[str]:
    """Task metric names present in any run's eval of that precision, in order."""
    found = dict.fromkeys(key for entry in entries for key, value in (entry["eval"].get(precision) or {}).items()
                          if is_number(value))
    return [key for key in found if key not in NOT_METRICS]


# ------------------------------------------------------------------ tables

def summary_table(summary: dict) -> str:
    """Every run of the experiment: layout, speed, scaling and metrics."""
    entries = summary["runs"]
    fp32, int8 = metric_names(entries, "fp32"), metric_names(entries, "int8")
    header = ["run", "nodes", "ranks/node", "world", "threads", "backend", "precision", "MPI", "steps",
              "train time", "samples/s", "speedup", "ideal", "efficiency", "final loss"]
    header += [f"fp32 {m}" for m in fp32] + [f"int8 {m}" for m in int8]
    rows = []
    for e in entries:
        row = [e["run"], e["nodes"], e["processes_per_node"], e["world_size"], e["threads_per_process"],
               e["backend"], e["precision"], e["mpi"], e["steps"], duration(e["train_seconds"]),
               figure(e["train_samples_per_second"]), figure(e.get("speedup")), figure(e.get("ideal_speedup")),
               percent(e.get("scaling_efficiency")), figure(e["final_loss"])]
        row += [figure((e["eval"]["fp32"] or {}).get(m)) for m in fp32]
        row += [figure((e["eval"]["int8"] or {}).get(m)) for m in int8]
        rows.append([str(c) for c in row])
    caption = f"{summary['experiment']}: {len(entries)} run(s), baseline {entries[0]['run']}"
    return html_table("cpuddp-summary", header, rows, caption)


def tries_table(entry: dict, out_dir: str) -> str:
    """One run's tries (tries.json, in summary.json): outcome, error line,
    the step it resumed from, its nodes and its log folder (linked from
    `out_dir`, where the table's file is; both relative to the workflow's
    folder or both absolute)."""
    header = ["try", "outcome", "error", "resumed from step", "hosts", "seconds", "log folder"]
    rows = []
    for t in entry.get("tries") or []:
        hosts = ", ".join(t.get("hosts") or []) or "this machine"
        if t.get("dropped"):
            hosts += f" (dropped {', '.join(t['dropped'])})"
        folder = t.get("log_dir")
        rows.append([str(t.get("try")), t.get("outcome", "—"), t.get("error") or "", figure(t.get("resumed_from_step")),
                     hosts, figure(t.get("seconds")),
                     Link(folder, os.path.relpath(folder, out_dir) + "/") if folder else "—"])
    caption = f"{entry['run']}: {len(rows)} recorded tr{'y' if len(rows) == 1 else 'ies'}"
    return html_table(f"cpuddp-tries-{entry['run']}", header, rows, caption)


def quantization_table(entries: list[dict]) -> str:
    """Per run, the three models measured side by side: metrics, samples/s,
    batch-1 latency, int8 over fp32 in the same runtime and over eager fp32,
    the gates' verdict and which one deploy/ holds."""
    names = metric_names(entries, "fp32")
    header = ["run", "model", "precision", "shapes", *names, "samples/s", "p50 ms", "p99 ms",
              "× fp32 same runtime", "× eager fp32", "verdict", "deployed"]
    rows = [candidate_row(e, name, names) for e in entries for name in CANDIDATES]
    cpus = dict.fromkeys(c for e in entries for c in [_cpu(e)] if c)
    caption = "fp32 eager, fp32 OpenVINO and int8 OpenVINO, timed side by side on the same rows"
    return html_table("cpuddp-quantization", header, rows, caption + (f" {' '.join(cpus)}" if cpus else ""))


def _cpu(entry: dict) -> str | None:
    return (entry.get("quantization") or {}).get("cpu") or (entry["eval"].get("fp32") or {}).get("cpu")


def candidate_row(entry: dict, name: str, names: list[str]) -> list[str]:
    """One model of one run; a model that was not evaluated says why."""
    evals = entry["eval"]
    ev, eager = evals.get(name), evals.get("fp32") or {}
    deployed = "deploy/" if (entry.get("deploy") or {}).get("candidate") == name else ""
    if ev is None:
        why = ((entry.get("quantization") or {}).get("reason") if name == "int8" else None) or \
            "not evaluated (quantization.enabled false)"
        return [entry["run"], LABELS[name]] + ["—"] * (len(names) + 7) + [why, deployed]
    same = ev.get("speedup_vs_fp32_same_runtime")
    if name == "int8" and same is None:
        same_runtime = evals.get("fp32_openvino") or {}
        same = ratio(same_runtime.get("samples_per_second"), ev.get("samples_per_second"), missing="—")
    return [entry["run"], LABELS[name], figure(ev.get("precision")), figure(ev.get("shapes")),
            *[figure(ev.get(m)) for m in names], figure(ev.get("samples_per_second")),
            figure(ev.get("latency_ms_p50")), figure(ev.get("latency_ms_p99")),
            f"{same:.2f}x" if is_number(same) else (same or "—"),
            ratio(eager.get("samples_per_second"), ev.get("samples_per_second"), missing="—")
            if ev.get("samples_per_second") else "—",
            _verdict(name, ev), deployed]


def _verdict(name: str, ev: dict) -> str:
    if name == "fp32":
        return "reference"
    if name == "int8" and "recommendation" in ev:
        return ev["recommendation"]
    if ev.get("meets_accuracy_gate") is False:
        return f"outside the accuracy gate {ev.get('accuracy_drop_points')}"
    return "accuracy gate met" if "meets_accuracy_gate" in ev else "—"


ENV_ROWS = (
    ("host", lambda e: e.get("host")),
    ("CPU", lambda e: e.get("cpu_model")),
    ("sockets x physical cores", lambda e: f"{e.get('sockets')} x {e.get('physical_cores')}"
                                           f" ({e.get('logical_cpus')} logical)"),
    ("native bf16", lambda e: e.get("native_bf16_flags")),
    ("int8 / bf16 support", lambda e: (e.get("low_precision") or {}).get("implies")),
    ("ISA flags", lambda e: " ".join(e.get("isa_flags") or [])),
    ("MPI", lambda e: f"{e['mpi'].get('flavour')} {e['mpi'].get('version')}" if e.get("mpi") else None),
    ("backend", lambda e: f"{e.get('backend')} ({e.get('backend_reason')})"),
    ("precision", lambda e: f"{e.get('precision')} ({e.get('precision_reason')})"),
    ("layout", lambda e: f"{e.get('nodes')} node(s) x {e.get('processes_per_node')} rank(s),"
                         f" {e.get('threads_per_process')} thread(s) each"
                         + (f" ({e['layout_reason']})" if e.get("layout_reason") else "")),
)


def environment_table(environments: dict[str, dict]) -> str:
    """One column per run: machine, software versions and launch choices."""
    runs = list(environments)
    rows = [[label] + [figure(get(environments[r])) for r in runs] for label, get in ENV_ROWS]
    packages = dict.fromkeys(p for env in environments.values() for p in env.get("versions", {}))
    rows += [[p] + [figure(environments[r].get("versions", {}).get(p)) for r in runs] for p in packages]
    return html_table("cpuddp-environment", [""] + runs, rows, "Environment of each run")
