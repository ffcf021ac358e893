"""The report's matplotlib charts: the loss of each run and of all runs, and
the measured speedup against ideal and published.

matplotlib is imported on first use, with the Agg backend: the report step
runs on machines without a display, and the tables need no matplotlib.
"""

from __future__ import annotations

from pathlib import Path

from workflow.scripts.report.numbers import percent
from workflow.scripts.report.runs import published_figures

LOSS_LABEL = "training loss (mean over ranks)"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    """Write a PNG without a Software tag, so that reruns give the same bytes."""
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
    """One run's loss curve (loss/<run>.png)."""
    plt = _pyplot()
    x, y, label = loss_points(train)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(x, y, marker="o", markersize=3)
    ax.set(xlabel=label, ylabel=LOSS_LABEL, title=f"Loss of run {name}")
    ax.grid(alpha=0.3)
    _save(fig, path)


def plot_losses(trains: dict[str, dict], path: Path) -> None:
    """Every run's loss curve on one chart (loss.png), to compare them."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    label = "training samples"
    for name, train in trains.items():
        x, y, label = loss_points(train)
        ax.plot(x, y, marker="o", markersize=2, label=name)
    ax.set(xlabel=label, ylabel=LOSS_LABEL, title="Training loss of every run")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, path)


def plot_scaling(entries: list[dict], published: dict | None, path: Path) -> None:
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
    _save(fig, path)


def plot_plan(plan: dict, path: Path) -> None:
    """Predicted efficiency against nodes: one panel per network, one line per
    lever set, the target as a dashed line, published runs as red diamonds."""
    plt = _pyplot()
    rows = plan["predictions"]
    nets = list(dict.fromkeys(r["network"] for r in rows))
    fig, axes = plt.subplots(1, len(nets), figsize=(5.5 * len(nets), 4.2), sharey=True, squeeze=False)
    for ax, net in zip(axes[0], nets):
        for label in dict.fromkeys(r["levers"] for r in rows):
            curve = [r for r in rows if r["network"] == net and r["levers"] == label]
            ax.plot([r["nodes"] for r in curve], [100 * r["efficiency"] for r in curve], label=label,
                    linewidth=2.2 if label == "no levers" else 1.2)
        ax.axhline(100 * plan["settings"]["target_efficiency"], color="k", linestyle="--", linewidth=0.8)
        published = plan.get("published_efficiency") or {}
        if published:
            ax.plot([int(n) for n in published], [100 * e for e in published.values()], "D", color="#dc2626",
                    label="published")
        ax.set_xscale("log", base=2)
        ax.set(xlabel="nodes", title=net)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("efficiency (% of nodes x one node)")
    axes[0][0].set_ylim(0, 110)
    axes[0][-1].legend(fontsize="x-small", loc="lower left")
    fig.suptitle(f"Scaling plan: {plan['title']}")
    _save(fig, path)


def plot_seeds(table: dict, path: Path) -> None:
    """Per task, each seed's score at the chosen rate (one marker per seed,
    one colour per row), so that the spread behind mean ± std is visible."""
    plt = _pyplot()
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
    _save(fig, path)
