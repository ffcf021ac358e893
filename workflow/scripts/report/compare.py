"""Compare experiments: two summaries side by side, and each against the
published figures of its experiment file, as one Markdown table.

    python -m workflow.scripts.report.compare A [B] [--results results] [--out FILE]

A and B are each an experiment name (experiments/<name>.yaml, else
results/<name>/summary.json), an experiment file, a results/<experiment>
folder or a summary.json. Runs are matched by name (a sweep's runs are named
after their values: n1, ppn2-gloo, ...). With only A, it is set against its
published figures.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass
from pathlib import Path

from workflow.scripts.settings import config as cfg, profiles
from workflow.scripts.common.atomic import read_json
from workflow.scripts.common.errors import UserError, run_cli
from workflow.scripts.common.candidates import CANDIDATES as EVALUATIONS
from workflow.scripts.report.numbers import figure, is_number, ratio
from workflow.scripts.report.runs import published_figures

EXPERIMENTS = Path("experiments")
FIELDS = (
    ("world_size", "ranks"),
    ("threads_per_process", "threads per rank"),
    ("backend", "backend"),
    ("precision", "precision"),
    ("steps", "steps"),
    ("train_seconds", "train seconds"),
    ("train_samples_per_second", "samples/s"),
    ("speedup", "speedup"),
    ("ideal_speedup", "ideal speedup"),
    ("scaling_efficiency", "scaling efficiency"),
    ("final_loss", "final loss"),
)


@dataclass
class Side:
    """One experiment: its name, summary (None before it ran) and published figures."""
    name: str
    summary: dict | None
    published: dict | None
    configfile: Path | None = None
    plan: dict | None = None  # results/<experiment>/plan/plan.json, once `make plan` wrote it
    nodes: dict | None = None  # run name -> nodes

    def entries(self) -> list[dict]:
        """The summary's run entries; none before the experiment ran."""
        return (self.summary or {}).get("runs", [])

    def runs(self) -> list[str]:
        """Run names: those that ran, then those only published."""
        names = [e["run"] for e in self.entries()]
        return names + [r for r in self.figures() if r not in names]

    def entry(self, run: str | None) -> dict:
        return next((e for e in self.entries() if e["run"] == run), {})

    def figures(self) -> dict:
        return published_figures(self.published)


def _experiment_file(path: Path, results: Path, profile: str | None = None) -> Side:
    config = profiles.experiment_config(path, profile)
    name = config["experiment"]
    summary_path = results / name / "summary.json"
    summary = read_json(summary_path) if summary_path.is_file() else None
    plan_path = results / name / "plan" / "plan.json"
    plan = read_json(plan_path) if plan_path.is_file() else None
    nodes = {run: c["distributed"]["nodes"] for run, c in cfg.runs(config).items()}
    return Side(name, summary, config.get("published"), path, plan, nodes)


def load_side(spec: str, results: Path = Path("results"), experiments: Path = EXPERIMENTS,
              profile: str | None = None) -> Side:
    """An experiment from a name, an experiment file, a results folder or a summary.json."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return _experiment_file(path, results, profile)
    if path.is_dir() and (path / "summary.json").is_file():
        path = path / "summary.json"
    if path.name == "summary.json" and path.is_file():
        summary = read_json(path)
        configfile = experiments / f"{summary['experiment']}.yaml"
        published = _experiment_file(configfile, results, profile).published if configfile.is_file() else None
        return Side(summary["experiment"], summary, published)
    if (experiments / f"{spec}.yaml").is_file():
        return _experiment_file(experiments / f"{spec}.yaml", results, profile)
    if (results / spec / "summary.json").is_file():
        return load_side(str(results / spec / "summary.json"), results, experiments, profile)
    raise UserError(f"compare: no experiment '{spec}': give a name with experiments/{spec}.yaml or "
                    f"{results / spec}/summary.json, an experiment file or a summary.json")


def value_at(entry: dict, key: str):
    """A summary field, or a dotted path such as eval.fp32.f1."""
    value = entry
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def field_keys(sides: list[Side]) -> list[tuple[str, str]]:
    """FIELDS, then every eval metric and published key found, in order."""
    known = dict(FIELDS)
    found = dict.fromkeys(key for side in sides for run in side.runs() for key in _run_keys(side, run))
    return list(FIELDS) + [(key, key.replace(".", " ").replace("_per_second", "/s"))
                           for key in found if key not in known]


def _run_keys(side: Side, run: str) -> list[str]:
    """A run's eval metrics (as dotted paths), then its published keys."""
    metrics = [f"eval.{p}.{m}" for p in EVALUATIONS for m, v in (value_at(side.entry(run), f"eval.{p}") or {}).items()
               if is_number(v)]
    return metrics + list(side.figures().get(run, {}))


def cell(value) -> str:
    """A Markdown cell: empty for missing, ints as they are (no grouping)."""
    return figure(value, missing="", thousands=False)


def run_pairs(a: Side, b: Side | None) -> list[tuple[str | None, str | None]]:
    """Which run of A sits beside which run of B: by name, or by position
    (baseline beside baseline) when the two share no run name."""
    a_runs, b_runs = a.runs(), (b.runs() if b else [])
    if not b:
        return [(r, None) for r in a_runs]
    if set(a_runs) & set(b_runs):
        return [(r, r if r in b_runs else None) for r in a_runs] + [(None, r) for r in b_runs if r not in a_runs]
    return list(itertools.zip_longest(a_runs, b_runs))


def compare(a: Side, b: Side | None = None) -> str:
    """The Markdown table: one row per run and field that any column has."""
    sides = [a] + ([b] if b else [])
    if b:
        header = ["run", "field", a.name, f"{a.name} published", b.name, f"{b.name} published", "B / A"]
    else:
        header = ["run", "field", a.name, "published", "measured / published"]
    lines = [_row(header), _row(["---"] * len(header))]
    for pair in run_pairs(a, b):
        label_run = pair[0] if not b or pair[0] == pair[1] else " / ".join(r or "—" for r in pair)
        for key, label in field_keys(sides):
            values = []
            for side, run in zip(sides, pair):
                values += [value_at(side.entry(run), key), side.figures().get(run, {}).get(key)]
            if all(v is None for v in values):
                continue
            last = ratio(values[0], values[2]) if b else ratio(values[1], values[0])
            lines.append(_row([label_run, label] + [cell(v) for v in values] + [last]))
        if not b:
            lines += [_row([label_run, label, cell(value), cell(published), ratio(published, value)])
                      for label, value, published in plan_rows(a, pair[0])]
    notes = [_note(side) for side in sides]
    return "\n".join([f"# {' vs '.join(s.name for s in sides)}", ""] + notes + [""] + lines) + "\n"


def plan_rows(side: Side, run: str | None) -> list[tuple[str, float, float | None]]:
    """The plan's predicted speedup and efficiency of a run on its node count
    (first network, no levers), beside the published speedup."""
    if not side.plan or not side.nodes or run not in side.nodes:
        return []
    rows = side.plan["predictions"]
    network = rows[0]["network"]
    at = next((r for r in rows if r["network"] == network and r["levers"] == rows[0]["levers"]
               and r["nodes"] == side.nodes[run]), None)
    if at is None:
        return []
    published = side.figures().get(run, {})
    return [(f"speedup (plan, {network})", round(at["speedup"], 3), published.get("speedup")),
            (f"efficiency (plan, {network})", round(at["efficiency"], 3),
             published["speedup"] / side.nodes[run] if "speedup" in published else None)]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _note(side: Side) -> str:
    if side.summary is None:
        where = f"; its header says how to run it: {side.configfile}" if side.configfile else ""
        parts = [f"not run yet (no results/{side.name}/summary.json{where})"]
    else:
        parts = [f"baseline run {side.summary.get('baseline') or side.summary['runs'][0]['run']}"]
    if side.plan:
        parts.append(f"plan: {side.plan['inputs'][0]}")
    if side.published:
        parts.append(f"published: {' '.join(str(side.published['source']).split())}")
    return f"- {side.name}: " + "; ".join(parts)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="experiment name, experiment file, results folder or summary.json")
    parser.add_argument("b", nargs="?", help="the second experiment (optional)")
    parser.add_argument("--results", default="results", help="results root (default: results)")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--cluster-profile",
                        help="a profile folder (make's PROFILE): its cluster file under each experiment")
    args = parser.parse_args(argv)
    results = Path(args.results)
    a = load_side(args.a, results, profile=args.cluster_profile)
    b = load_side(args.b, results, profile=args.cluster_profile) if args.b else None
    if a.summary is None and not a.published and not (b and (b.summary or b.published)):
        raise UserError(f"compare: {a.name} has neither results nor published figures; run it first")
    text = compare(a, b)
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    run_cli(main)
