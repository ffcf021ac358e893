"""The judge of bench.accuracy_seeds: dev scores, their mean and spread over
seeds, the verdict per candidate row against the exact path, and the loss
curves (table, JSON-ready dicts and a chart).

A candidate is kept where its mean main score (F1 for MRPC-shaped pairs,
Pearson for STS-B-shaped ones) is within one standard deviation (over
seeds) of the exact path's mean: |mean_candidate - mean_exact| <= std_exact.
The loss curves are compared as a figure (`plot`) and by two numbers: the
mean gap between the row's mean curve and the exact path's, and the exact
path's own seed-to-seed spread at the same steps.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

METRICS = {"mrpc": ("f1", "accuracy"), "stsb": ("pearson", "spearman")}
"""Per task shape, the dev scores; the first is the one the verdict reads."""


def scores(task: str, predictions, labels) -> dict:
    """mrpc: `predictions` are class ids: F1 of class 1 and accuracy;
    stsb: they are scores: Pearson and Spearman correlation with `labels`."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if task == "stsb":
        from scipy import stats

        return {"pearson": float(stats.pearsonr(predictions, labels)[0]),
                "spearman": float(stats.spearmanr(predictions, labels)[0])}
    tp = int(((predictions == 1) & (labels == 1)).sum())
    wrong = int((predictions != labels).sum())
    return {"f1": 2 * tp / max(2 * tp + wrong, 1), "accuracy": float((predictions == labels).mean())}


def _spread(values: list[float]) -> dict:
    return {"values": values, "mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None, "n": len(values)}


def summarize(runs: list[dict]) -> dict:
    """{task: {row: {metric: {values, mean, std, n}}}} over the seeds run."""
    out: dict = {}
    for run in runs:
        for metric in METRICS[run["task"]]:
            out.setdefault(run["task"], {}).setdefault(run["row"], {}).setdefault(metric, []).append(
                run["scores"][metric])
    return {task: {row: {m: _spread(v) for m, v in metrics.items()} for row, metrics in rows.items()}
            for task, rows in out.items()}


def mean_curve(runs: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps logged by every run, and the mean and std of the loss there."""
    common = sorted(set.intersection(*(set(s for s, _ in r["loss_history"]) for r in runs))) if runs else []
    losses = np.array([[dict(r["loss_history"])[s] for s in common] for r in runs]).reshape(len(runs), -1)
    return np.array(common), losses.mean(0), losses.std(0, ddof=1) if len(runs) > 1 else np.zeros(len(common))


def verdicts(runs: list[dict], summary: dict, exact: str, candidates: list[str]) -> dict:
    """{task: {candidate: verdict}}: the main score against the exact row's
    and the loss-curve gap (None where a side is missing or has one seed)."""
    out: dict = {}
    for task, rows in summary.items():
        if exact not in rows:
            continue
        metric = METRICS[task][0]
        base = rows[exact][metric]
        e_steps, e_mean, e_std = mean_curve([r for r in runs if r["task"] == task and r["row"] == exact])
        for row in candidates:
            if row not in rows:
                continue
            mean = rows[row][metric]["mean"]
            steps, c_mean, _ = mean_curve([r for r in runs if r["task"] == task and r["row"] == row])
            shared = np.intersect1d(steps, e_steps)
            gap = float(np.abs(c_mean[np.isin(steps, shared)] - e_mean[np.isin(e_steps, shared)]).mean()) \
                if len(shared) else None
            out.setdefault(task, {})[row] = {
                "metric": metric, "mean": mean, "exact_mean": base["mean"], "exact_std": base["std"],
                "difference": mean - base["mean"],
                "within_one_std": None if base["std"] is None else abs(mean - base["mean"]) <= base["std"],
                "loss_gap": gap, "exact_loss_spread": float(e_std[np.isin(e_steps, shared)].mean())
                if len(shared) and base["n"] > 1 else None}
    return out


def print_table(summary: dict, judged: dict, seeds: list[int]) -> None:
    for task, rows in summary.items():
        print(f"\n{task}-shaped dev ({', '.join(METRICS[task])}); seeds {' '.join(map(str, seeds))}")
        print(f"{'':32} {'metric':>9} " + " ".join(f"{'seed ' + str(s):>9}" for s in seeds)
              + f" {'mean':>8} {'std':>8}")
        for row, metrics in rows.items():
            for metric, s in metrics.items():
                std = "-" if s["std"] is None else f"{s['std']:.4f}"
                print(f"{row:32} {metric:>9} " + " ".join(f"{v:9.4f}" for v in s["values"])
                      + f" {s['mean']:8.4f} {std:>8}")
        for row, v in judged.get(task, {}).items():
            within = {True: "yes", False: "no", None: "n/a (one seed: no std)"}[v["within_one_std"]]
            gap = "-" if v["loss_gap"] is None else f"{v['loss_gap']:.4f}"
            spread = "-" if v["exact_loss_spread"] is None else f"{v['exact_loss_spread']:.4f}"
            print(f"  {row}: mean {v['metric']} {v['mean']:.4f} vs exact {v['exact_mean']:.4f} "
                  f"({v['difference']:+.4f}); within one std of exact: {within}; loss curve: mean gap {gap} "
                  f"against the exact path's seed spread {spread}")


def plot(runs: list[dict], rows: list[str], path: Path, title: str) -> None:
    """Per task, every row's loss curves: a thin line per seed, a thick
    line for the mean over seeds, one colour per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    task_names = list(dict.fromkeys(r["task"] for r in runs))
    fig, axes = plt.subplots(1, len(task_names), figsize=(6.5 * len(task_names), 4.5), squeeze=False)
    colours = dict(zip(rows, plt.get_cmap("tab10").colors))
    for ax, task in zip(axes[0], task_names):
        for row in rows:
            mine = [r for r in runs if r["task"] == task and r["row"] == row and r["loss_history"]]
            for run in mine:
                steps, losses = zip(*run["loss_history"])
                ax.plot(steps, losses, color=colours[row], linewidth=0.7, alpha=0.35)
            if mine:
                steps, mean, _ = mean_curve(mine)
                ax.plot(steps, mean, color=colours[row], linewidth=2.2, label=f"{row} (mean of {len(mine)})")
        ax.set(title=f"{task}-shaped: training loss", xlabel="step (global batch 32)", ylabel="loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
