"""The report's matplotlib charts: the loss of each run and of all runs, and
the measured speedup against ideal and published, and the evaluations during
training (evaluation.every).

matplotlib comes from common/figures.py (Agg, on first use): the report step
runs on machines without a display, and the tables need no matplotlib.
"""

from __future__ import annotations

from pathlib import Path

from workflow.scripts.common.figures import pyplot, save
from workflow.scripts.report.numbers import percent
from workflow.scripts.report.runs import published_figures

LOSS_LABEL = "training loss (mean over ranks)"


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
    """One run's loss curve (loss/<run>.png)."""
    plt = pyplot()
    x, y, label = loss_points(train)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(x, y, marker="o", markersize=3)
    ax.set(xlabel=label, ylabel=LOSS_LABEL, title=f"Loss of run {name}")
    ax.grid(alpha=0.3)
    save(fig, path)


def plot_losses(trains: dict[str, dict], path: Path) -> None:
    """Every run's loss curve on one chart (loss.png), to compare them."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    label = "training samples"
    for name, train in trains.items():
        x, y, label = loss_points(train)
        ax.plot(x, y, marker="o", markersize=2, label=name)
    ax.set(xlabel=label, ylabel=LOSS_LABEL, title="Training loss of every run")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    save(fig, path)


def plot_scaling(entries: list[dict], published: dict | None, path: Path) -> None:
    """Measured speedup per run as bars; ideal and published as markers."""
    plt = pyplot()
    names = [e["run"] for e in entries]
    xs = range(len(entries))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(entries) + 2), 4))
    bars = ax.bar(xs, [e["speedup"] for e in entries], color="#3b82f6", label="measured")
    for bar, e in zip(bars, entries):
        ax.annotate(f"{e['speedup']:.2f}x\n({percent(e['scaling_efficiency'])})",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.plot(xs, [e["ideal_speedup"] for e in entries], "k_", markersize=28, mew=2, label="ideal (cores)")
    figures = published_figures(published)
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
    save(fig, path)


def evaluated(entries: list[dict]) -> list[dict]:
    """The runs that evaluated during training (evaluation.every): those the chart has."""
    return [e for e in entries if (e.get("training_evaluation") or {}).get("history")]


def plot_evaluation(entries: list[dict], path: Path) -> None:
    """Each run's deciding metric at each evaluation during training, its best marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    metrics = []
    for e in evaluated(entries):
        ev = e["training_evaluation"]
        metrics.append(ev["metric"])
        points = [(h["step"], h[ev["metric"]]) for h in ev["history"] if h.get(ev["metric"]) is not None]
        ax.plot([s for s, _ in points], [v for _, v in points], marker="o", markersize=3, label=e["run"])
        best = [v for s, v in points if s == ev.get("best_step")]
        if best:
            ax.plot([ev["best_step"]], best[:1], "*", color="#dc2626", markersize=11)
    ax.set(xlabel="training step", ylabel=f"dev {' / '.join(dict.fromkeys(metrics))}",
           title="Evaluation during training (star: best)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    save(fig, path)


def plot_seeds(table: dict, path: Path) -> None:
    """Per task, each seed's score at the chosen rate (one marker per seed,
    one colour per row), so that the spread behind mean ± std is visible."""
    plt = pyplot()
    tasks = table["tasks"] or ["(none)"]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(tasks)), 3.5))
    rows = table["rows"]
    width = 0.8 / max(1, len(rows))
    for i, row in enumerate(rows):
        xs, ys = [], []
        for j, task in enumerate(tasks):
            cell = row["cells"].get(task) or {}
            for seed in cell.get("seeds", []):
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(seed["score"])
        ax.scatter(xs, ys, label=row["row"], s=18)
    ax.set_xticks(range(len(tasks)), [t.upper() for t in tasks])
    ax.set_ylabel("dev score per seed (%)")
    if rows:
        ax.legend(fontsize="small")
    save(fig, path)
