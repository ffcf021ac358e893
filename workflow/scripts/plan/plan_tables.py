"""The scaling plan's numbers and words: predictions for every network,
lever set and node count (scaling_model.py), the recommendation for a
target efficiency, and the tables (Markdown for the terminal and the README;
HTML for the report)."""

from __future__ import annotations

import html

from workflow.scripts.plan.scaling_model import Levers, Network, Profile, efficiency
from workflow.scripts.report.tables import html_table

# Simplest first: on a tie, the plan recommends the earlier set. Accumulation
# comes last because it changes the global batch (the training itself).
LEVER_SETS = (
    Levers(),
    Levers(bucket_mb=5),
    Levers(bucket_mb=100),
    Levers(compression="fp16"),
    Levers(compression="bf16"),
    Levers(compression="powersgd"),
    Levers(accumulation=2),
    Levers(accumulation=4),
    Levers(accumulation=4, compression="fp16"),
)
SHOWN_NODES = (1, 2, 3, 4, 8, 16, 32, 64)
LOW_EFFICIENCY = 0.75


def predictions(profile: Profile, networks: list[Network], max_nodes: int, lever_sets=LEVER_SETS) -> list[dict]:
    """One row per network, lever set and node count 1..max_nodes."""
    rows = []
    for net in networks:
        for levers in lever_sets:
            for nodes in range(1, max_nodes + 1):
                step, speedup, eff = efficiency(profile, net, nodes, levers)
                rows.append({"network": net.name, "levers": levers.label, "accumulation": levers.accumulation,
                             "compression": levers.compression, "bucket_mb": levers.bucket_mb, "nodes": nodes,
                             "step_seconds": step.seconds, "compute_seconds": step.compute,
                             "communication_seconds": step.communication, "exposed_seconds": step.exposed,
                             "overlap_seconds": step.overlap, "samples_per_second": step.samples_per_second,
                             "speedup": speedup, "efficiency": eff})
    return rows


def _curve(rows: list[dict], network: str, levers: str) -> list[dict]:
    return [r for r in rows if r["network"] == network and r["levers"] == levers]


def nodes_at(curve: list[dict], target: float) -> int:
    """The most nodes for which efficiency stays at or above `target` all the way."""
    best = 0
    for row in curve:
        if row["efficiency"] < target - 1e-9:
            break
        best = row["nodes"]
    return best


def falls_below(curve: list[dict], level: float = LOW_EFFICIENCY) -> int | None:
    """The first node count whose efficiency is below `level` (None: never, up to the last)."""
    return next((r["nodes"] for r in curve if r["efficiency"] < level), None)


def recommend(rows: list[dict], target: float) -> list[dict]:
    """Per network: the lever set that keeps `target` on the most nodes,
    the same without levers, and where each set falls below 75%."""
    out = []
    for network in dict.fromkeys(r["network"] for r in rows):
        labels = list(dict.fromkeys(r["levers"] for r in rows if r["network"] == network))
        reach = {label: nodes_at(_curve(rows, network, label), target) for label in labels}
        best = max(labels, key=lambda label: (reach[label], -labels.index(label)))
        at = {label: _curve(rows, network, label)[max(reach[label], 1) - 1] for label in labels}
        out.append({"network": network, "target": target, "levers": best, "nodes": reach[best],
                    "efficiency": at[best]["efficiency"], "samples_per_second": at[best]["samples_per_second"],
                    "nodes_without_levers": reach[labels[0]],
                    "below_75": {label: falls_below(_curve(rows, network, label)) for label in labels}})
    return out


def recommendation_lines(recommendations: list[dict], max_nodes: int) -> list[str]:
    lines = []
    for rec in recommendations:
        target = f"{100 * rec['target']:.0f}%"
        if rec["nodes"] == 0:
            lines.append(f"{rec['network']}: no lever set reaches {target} efficiency on 2 nodes")
            continue
        below = rec["below_75"]
        plain = below[next(iter(below))]
        line = (f"{rec['network']}: for >= {target} efficiency use up to {rec['nodes']} nodes with "
                f"{rec['levers']} ({100 * rec['efficiency']:.0f}%, {rec['samples_per_second']:.1f} samples/s)")
        if rec["levers"] != next(iter(below)):
            line += f"; without levers up to {rec['nodes_without_levers']}"
        line += f". Efficiency falls below 75% at {_count(plain, max_nodes)} without levers"
        if rec["levers"] != next(iter(below)):
            line += f", at {_count(below[rec['levers']], max_nodes)} with {rec['levers']}"
        lines.append(line)
    return lines


def _count(nodes: int | None, max_nodes: int) -> str:
    return f"more than {max_nodes} nodes" if nodes is None else f"{nodes} nodes"


def grid(rows: list[dict], network: str, shown=SHOWN_NODES) -> tuple[list[str], list[list[str]]]:
    """Efficiency per lever set (rows) and node count (columns)."""
    nodes = [n for n in shown if any(r["nodes"] == n for r in rows)]
    header = ["levers"] + [f"{n} node{'s' if n > 1 else ''}" for n in nodes]
    body = []
    for label in dict.fromkeys(r["levers"] for r in rows if r["network"] == network):
        by_nodes = {r["nodes"]: r for r in _curve(rows, network, label)}
        body.append([label] + [f"{100 * by_nodes[n]['efficiency']:.0f}%" for n in nodes])
    return header, body


def detail(rows: list[dict], network: str, levers: str, shown=SHOWN_NODES) -> tuple[list[str], list[list[str]]]:
    """One lever set's step split per node count."""
    header = ["nodes", "step s", "compute s", "communication s", "exposed s", "overlap s", "samples/s",
              "speedup", "efficiency"]
    body = [[str(r["nodes"]), f"{r['step_seconds']:.3f}", f"{r['compute_seconds']:.3f}",
             f"{r['communication_seconds']:.3f}", f"{r['exposed_seconds']:.3f}", f"{r['overlap_seconds']:.3f}",
             f"{r['samples_per_second']:.1f}", f"{r['speedup']:.2f}x", f"{100 * r['efficiency']:.0f}%"]
            for r in _curve(rows, network, levers) if r["nodes"] in shown]
    return header, body


def markdown(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body]) + "\n"


def plan_markdown(plan: dict) -> str:
    """The whole plan as text: inputs, per network the efficiency grid and the
    plain run's step split, then the recommendations."""
    rows, parts = plan["predictions"], [f"# Scaling plan: {plan['title']}\n", *[f"- {line}" for line in
                                                                              plan["inputs"]], ""]
    for network in dict.fromkeys(r["network"] for r in rows):
        parts += [f"## {network}\n", "Efficiency against one node without levers:\n",
                  markdown(*grid(rows, network)), "Step without levers:\n",
                  markdown(*detail(rows, network, rows[0]["levers"]))]
    parts += ["## Recommendation\n"] + [f"- {line}" for line in plan["recommendation_lines"]]
    return "\n".join(parts) + "\n"


def plan_html(plan: dict) -> str:
    rows = plan["predictions"]
    parts = [html_table("cpuddp-plan-" + str(i), *grid(rows, network), f"Predicted efficiency: {network}")
             for i, network in enumerate(dict.fromkeys(r["network"] for r in rows))]
    notes = "".join(f"<li>{html.escape(line)}</li>" for line in plan["inputs"] + plan["recommendation_lines"])
    return "".join(parts) + f"<ul style='font:13px system-ui,sans-serif'>{notes}</ul>\n"
