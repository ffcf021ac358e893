"""The report's HTML tables: every run, fp32 against int8, and each run's
environment.

Tables are fragments with inline styles, so that they read the same in the
report's viewer and inside its landing page (overview.html).
"""

from __future__ import annotations

import datetime
import html

from workflow.scripts.report.numbers import figure, percent, ratio

# Eval fields that are not task metrics (the quantization table shows the throughput on its own).
NOT_METRICS = ("samples", "samples_per_second")
CELL = "border:1px solid #cbd5e1;padding:3px 8px;text-align:right;white-space:nowrap"
HEAD = CELL + ";background:#f1f5f9;text-align:center"
TABLE = "border-collapse:collapse;font:13px/1.4 system-ui,sans-serif;margin:4px 0 12px 0"


# --------------------------------------------------------------- formatting

def duration(seconds) -> str:
    """Train time as h:mm:ss, which reads faster than seconds."""
    return "—" if seconds is None else str(datetime.timedelta(seconds=round(seconds)))


def html_table(table_id: str, header: list[str], rows: list[list[str]], caption: str = "") -> str:
    """An inline-styled HTML table; cells are escaped here."""
    head = "".join(f'<th style="{HEAD}">{html.escape(h)}</th>' for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td style="{_cell_style(str(c))}">{html.escape(str(c))}</td>' for c in row) + "</tr>"
        for row in rows)
    cap = f'<caption style="text-align:left;font-weight:600">{html.escape(caption)}</caption>' if caption else ""
    return (f'<div style="overflow-x:auto"><table id="{table_id}" style="{TABLE}">{cap}'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>\n")


def _cell_style(text: str) -> str:
    """Numbers stay on one line, right-aligned; long text wraps."""
    return CELL if len(text) <= 40 else CELL + ";white-space:normal;text-align:left;min-width:24em"


def metric_names(entries: list[dict], precision: str) -> list[str]:
    """Task metric names present in any run's eval of that precision, in order."""
    found = dict.fromkeys(key for entry in entries for key in entry["eval"].get(precision) or {})
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


def quantization_table(entries: list[dict]) -> str:
    """fp32 against int8 per run: every metric, throughput and its ratio."""
    names = metric_names(entries, "fp32")
    header = ["run"] + [f"{m} {p}" for m in names for p in ("fp32", "int8", "Δ")]
    header += ["fp32 samples/s", "int8 samples/s", "int8 speedup"]
    rows = []
    for e in entries:
        fp32, int8 = e["eval"]["fp32"] or {}, e["eval"]["int8"]
        if int8 is None:
            rows.append([e["run"]] + ["—"] * (len(header) - 2) + ["no int8 evaluation"])
            continue
        row = [e["run"]]
        for m in names:
            a, b = fp32.get(m), int8.get(m)
            row += [figure(a), figure(b), figure(b - a) if a is not None and b is not None else "—"]
        a, b = fp32.get("samples_per_second"), int8.get("samples_per_second")
        # A zero int8 throughput is no measurement: '—', not '0.00x'.
        row += [figure(a), figure(b), ratio(a, b, missing="—") if b else "—"]
        rows.append(row)
    return html_table("cpuddp-quantization", header, rows, "Static INT8 quantization against fp32 (evaluation)")


ENV_ROWS = (
    ("host", lambda e: e.get("host")),
    ("CPU", lambda e: e.get("cpu_model")),
    ("sockets x physical cores", lambda e: f"{e.get('sockets')} x {e.get('physical_cores')}"
                                           f" ({e.get('logical_cpus')} logical)"),
    ("native bf16", lambda e: e.get("native_bf16_flags")),
    ("ISA flags", lambda e: " ".join(e.get("isa_flags") or [])),
    ("MPI", lambda e: f"{e['mpi'].get('flavour')} {e['mpi'].get('version')}" if e.get("mpi") else None),
    ("backend", lambda e: f"{e.get('backend')} ({e.get('backend_reason')})"),
    ("precision", lambda e: f"{e.get('precision')} ({e.get('precision_reason')})"),
    ("layout", lambda e: f"{e.get('nodes')} node(s) x {e.get('processes_per_node')} rank(s),"
                         f" {e.get('threads_per_process')} thread(s) each"),
)


def environment_table(environments: dict[str, dict]) -> str:
    """One column per run: machine, software versions and launch choices."""
    runs = list(environments)
    rows = [[label] + [figure(get(environments[r])) for r in runs] for label, get in ENV_ROWS]
    packages = dict.fromkeys(p for env in environments.values() for p in env.get("versions", {}))
    rows += [[p] + [figure(environments[r].get("versions", {}).get(p)) for r in runs] for p in packages]
    return html_table("cpuddp-environment", [""] + runs, rows, "Environment of each run")
