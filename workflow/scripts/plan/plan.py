"""The scaling plan: from one node's measured step (plan/profile.py) and a
measured (plan/network.py) or stated network, the predicted throughput,
speedup and efficiency on 1 to `max_nodes` nodes for each lever set, a
recommendation for a target efficiency, a table and a chart.

    python -m workflow.scripts.plan.plan --profile profile.json [--config C] [--network network.json]
        [--bandwidth-gbit 10 25] [--latency-us 50] [--step-seconds S] [--target 0.9] [--out-dir DIR]

C is the plan's configuration slice or an experiment file: its `plan`
section gives the defaults of the options (without C: the schema's), its
published figures are drawn beside the prediction. The model: scaling_model.py and docs/scaling-plan.md, The model.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workflow.scripts.settings import config as cfg, profiles
from workflow.scripts.settings.views import PlanSettings, PlanView
from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.errors import run_cli
from workflow.scripts.plan import plan_tables
from workflow.scripts.plan.chart import plot_plan
from workflow.scripts.report.runs import published_figures
from workflow.scripts.plan.scaling_model import Network, Profile, fit_network


def read_config(path: str | None, profile: str | None = None) -> PlanView | None:
    """The plan stage's view of an experiment file (under `profile`'s
    cluster when given) or of a JSON slice; None without either."""
    if not path:
        return None
    if path.endswith((".yaml", ".yml")):
        return PlanView.pick(profiles.experiment_config(path, profile))
    return PlanView.pick(read_json(path))


def settings(config: PlanView | None, args) -> dict:
    """The plan section (without a configuration: the schema's defaults),
    then the command line over it."""
    plan = (config.plan if config else PlanSettings()).as_dict()
    for key in plan:
        value = getattr(args, key, None)  # the options are named after the section's keys
        if value is not None:
            plan[key] = value
    plan["step_seconds"] = plan["step_seconds"] or None  # --step-seconds 0: the measured step
    return plan


def networks(plan: dict, measured: str | None) -> list[Network]:
    found = [fit_network(read_json(measured)["points"])] if measured else []
    return found + [Network.stated(gbit, plan["latency_us"]) for gbit in plan["bandwidth_gbit"]]


def published_efficiency(config: PlanView | None) -> dict[int, float]:
    """Node count -> published efficiency (speedup / nodes) of the experiment's runs."""
    figures = published_figures(config.published) if config else {}
    if not figures:
        return {}
    runs = cfg.runs(config.as_dict())  # the sweep expands mappings
    return {runs[name]["distributed"]["nodes"]: values["speedup"] / runs[name]["distributed"]["nodes"]
            for name, values in figures.items() if name in runs and "speedup" in values}


def inputs(profile: Profile, raw: dict, nets: list[Network]) -> list[str]:
    lines = [f"single-node step: {profile.step:.3f} s ({profile.source}; forward {profile.forward:.3f} s, "
             f"backward {profile.backward:.3f} s, update {profile.update:.3f} s), {raw.get('model', '?')}, batch "
             f"{profile.batch_size} x {raw.get('seq_len', '?')} tokens per rank, {profile.processes_per_node} "
             f"rank(s) per node, {profile.grad_bytes / 1e6:.1f} MB of gradients"]
    return lines + [f"network {net.name}" for net in nets]


def make_plan(raw_profile: dict, config: PlanView | None, plan: dict, measured: str | None) -> dict:
    profile = Profile.from_dict(raw_profile)
    if plan["step_seconds"]:
        profile = profile.scaled_to(plan["step_seconds"])
    nets = networks(plan, measured)
    rows = plan_tables.predictions(profile, nets, plan["max_nodes"])
    recommendations = plan_tables.recommend(rows, plan["target_efficiency"])
    return {"title": (config and config.experiment) or raw_profile.get("model", "plan"), "settings": plan,
            "profile": {k: v for k, v in profile.to_dict().items() if k != "grads"},
            "networks": [{"name": n.name, "gbit": n.gbit, "latency_us": n.latency * 1e6} for n in nets],
            "inputs": inputs(profile, raw_profile, nets), "predictions": rows, "recommendations": recommendations,
            "recommendation_lines": plan_tables.recommendation_lines(recommendations, plan["max_nodes"]),
            "published_efficiency": published_efficiency(config)}


def write(plan: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "plan.json", plan)
    (out_dir / "plan.md").write_text(plan_tables.plan_markdown(plan))
    (out_dir / "plan.html").write_text(plan_tables.plan_html(plan))
    plot_plan(plan, out_dir / "plan.png")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", required=True, help="profile.json of plan/profile.py")
    parser.add_argument("--config", help="the plan's configuration slice (JSON) or an experiment file")
    parser.add_argument("--cluster-profile",
                        help="a profile folder (make's PROFILE): its cluster file under the experiment")
    parser.add_argument("--network", help="network.json of plan/network.py (measured all-reduce times)")
    parser.add_argument("--bandwidth-gbit", dest="bandwidth_gbit", type=float, nargs="+")
    parser.add_argument("--latency-us", dest="latency_us", type=float)
    parser.add_argument("--step-seconds", dest="step_seconds", type=float,
                        help="a stated single-node step time (0: the measured one)")
    parser.add_argument("--target", dest="target_efficiency", type=float)
    parser.add_argument("--max-nodes", dest="max_nodes", type=int)
    parser.add_argument("--out-dir", help="writes plan.json, plan.md, plan.html and plan.png there")
    args = parser.parse_args(argv)
    config = read_config(args.config, args.cluster_profile)
    plan = make_plan(read_json(args.profile), config, settings(config, args), args.network)
    print(plan_tables.plan_markdown(plan), end="")
    if args.out_dir:
        write(plan, Path(args.out_dir))
        print(f"plan: {args.out_dir}/plan.md, plan.json, plan.png")


if __name__ == "__main__":
    run_cli(main)
