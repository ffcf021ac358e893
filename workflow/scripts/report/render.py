"""Report step: the tables and charts of an experiment, from its summary.

Writes into --out-dir (the rule marks each for `snakemake --report`):
summary.html (every run), scaling.png (measured speedup against ideal and
published), loss.png (all runs) and loss/<run>.png, quantization.html (fp32
against int8), environment.html (the machine and software of each run) and
overview.html (the landing page: runs table and both charts, embedded).
HTML files are fragments with inline styles, so that they read the same in
the report's viewer and inside its landing page.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import html
from pathlib import Path

from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import run_cli

NOT_METRICS = ("samples", "samples_per_second")
CELL = "border:1px solid #cbd5e1;padding:3px 8px;text-align:right;white-space:nowrap"
HEAD = CELL + ";background:#f1f5f9;text-align:center"
TABLE = "border-collapse:collapse;font:13px/1.4 system-ui,sans-serif;margin:4px 0 12px 0"


# --------------------------------------------------------------- formatting

def fmt(value, digits: int = 4) -> str:
    """A table cell: '—' for missing, 4 significant digits for floats."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}g}" if abs(value) >= 10 ** digits else f"{value:.{digits}g}"


def duration(seconds) -> str:
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
    names: list[str] = []
    for entry in entries:
        for key in entry["eval"].get(precision) or {}:
            if key not in NOT_METRICS and key not in names:
                names.append(key)
    return names


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
               fmt(e["train_samples_per_second"]), fmt(e.get("speedup")), fmt(e.get("ideal_speedup")),
               percent(e.get("scaling_efficiency")), fmt(e["final_loss"])]
        row += [fmt((e["eval"]["fp32"] or {}).get(m)) for m in fp32]
        row += [fmt((e["eval"]["int8"] or {}).get(m)) for m in int8]
        rows.append([str(c) for c in row])
    caption = f"{summary['experiment']}: {len(entries)} run(s), baseline {entries[0]['run']}"
    return html_table("cpuddp-summary", header, rows, caption)


def percent(value) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


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
            row += [fmt(a), fmt(b), fmt(b - a) if a is not None and b is not None else "—"]
        a, b = fp32.get("samples_per_second"), int8.get("samples_per_second")
        row += [fmt(a), fmt(b), f"{b / a:.2f}x" if a and b else "—"]
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
    rows = [[label] + [fmt(get(environments[r])) for r in runs] for label, get in ENV_ROWS]
    packages = []
    for env in environments.values():
        packages += [p for p in env.get("versions", {}) if p not in packages]
    rows += [[p] + [fmt(environments[r].get("versions", {}).get(p)) for r in runs] for p in packages]
    return html_table("cpuddp-environment", [""] + runs, rows, "Environment of each run")


# ------------------------------------------------------------------ charts

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    _pyplot().close(fig)


def loss_points(train: dict) -> tuple[list[float], list[float], str]:
    """(x, loss, x label) of a run's loss history, x in training samples.

    The history holds [step, loss] pairs; a bare list of losses is also read
    (x is then the logging point)."""
    history = train.get("loss_history") or []
    if history and not isinstance(history[0], (list, tuple)):
        return list(range(1, len(history) + 1)), [float(v) for v in history], "logging point"
    per_step = train["train_samples"] / train["steps"] if train.get("steps") else 1
    return [s * per_step for s, _ in history], [float(v) for _, v in history], "training samples"


def plot_loss(name: str, train: dict, path: Path) -> None:
    plt = _pyplot()
    x, y, label = loss_points(train)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(x, y, marker="o", markersize=3)
    ax.set(xlabel=label, ylabel="training loss (mean over ranks)", title=f"Loss of run {name}")
    ax.grid(alpha=0.3)
    _save(fig, path)


def plot_losses(trains: dict[str, dict], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    label = "training samples"
    for name, train in trains.items():
        x, y, label = loss_points(train)
        ax.plot(x, y, marker="o", markersize=2, label=name)
    ax.set(xlabel=label, ylabel="training loss (mean over ranks)", title="Training loss of every run")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, path)


def plot_scaling(entries: list[dict], published: dict, path: Path) -> None:
    """Measured speedup per run as bars; ideal and published as markers."""
    plt = _pyplot()
    names = [e["run"] for e in entries]
    xs = range(len(entries))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(entries) + 2), 4))
    bars = ax.bar(xs, [e["speedup"] for e in entries], color="#3b82f6", label="measured")
    for bar, e in zip(bars, entries):
        ax.annotate(f"{e['speedup']:.2f}x\n({percent(e['scaling_efficiency'])})",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.plot(xs, [e["ideal_speedup"] for e in entries], "k_", markersize=28, mew=2, label="ideal (cores)")
    figures = (published or {}).get("figures") or {}
    shown = [(i, figures[n]["speedup"]) for i, n in enumerate(names)
             if isinstance(figures.get(n), dict) and "speedup" in figures[n]]
    if shown:
        ax.plot([i for i, _ in shown], [s for _, s in shown], "D", color="#dc2626", label="published")
    ax.set_xticks(list(xs), [f"{e['run']}\n{e['world_size']} rank(s) x {e['threads_per_process']} thr"
                             for e in entries], fontsize=8)
    top = max([e["speedup"] for e in entries] + [e["ideal_speedup"] for e in entries] + [s for _, s in shown])
    ax.set_ylim(0, top * 1.25)
    ax.set(ylabel=f"speedup over {names[0]} (throughput)", title="Scaling: measured against ideal")
    ax.legend(fontsize="small", loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


# -------------------------------------------------------------------- main

def write_report(summary: dict, settings: dict, results: Path, out_dir: Path) -> list[Path]:
    """Every table and chart of the experiment; returns the files written."""
    entries = summary["runs"]
    trains = {e["run"]: read_json(results / e["run"] / "train_metrics.json") for e in entries}
    envs = {e["run"]: read_json(results / e["run"] / "environment.json") for e in entries}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("summary.html", summary_table(summary)),
                       ("quantization.html", quantization_table(entries)),
                       ("environment.html", environment_table(envs))):
        (out_dir / name).write_text(text)
        written.append(out_dir / name)
    plot_scaling(entries, settings.get("published"), out_dir / "scaling.png")
    plot_losses(trains, out_dir / "loss.png")
    written += [out_dir / "scaling.png", out_dir / "loss.png"]
    for name, train in trains.items():
        plot_loss(name, train, out_dir / "loss" / f"{name}.png")
        written.append(out_dir / "loss" / f"{name}.png")
    (out_dir / "overview.html").write_text(overview(summary, out_dir))
    return written + [out_dir / "overview.html"]


def overview(summary: dict, out_dir: Path) -> str:
    """The report's landing page: the runs table and both charts, embedded."""
    parts = [summary_table(summary)]
    for name, alt in (("scaling.png", "scaling chart"), ("loss.png", "loss chart")):
        data = base64.b64encode((out_dir / name).read_bytes()).decode()
        parts.append(f'<p><img id="cpuddp-{name[:-4]}" alt="{alt}" src="data:image/png;base64,{data}"'
                     ' style="max-width:100%"></p>\n')
    return "".join(parts)


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
