"""The scaling plan's chart: predicted efficiency against nodes, per network
and lever set, beside the target and the published runs."""

from __future__ import annotations

from pathlib import Path

from workflow.scripts.common.figures import pyplot, save


def plot_plan(plan: dict, path: Path) -> None:
    """Predicted efficiency against nodes: one panel per network, one line per
    lever set, the target as a dashed line, published runs as red diamonds."""
    plt = pyplot()
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
    save(fig, path)
