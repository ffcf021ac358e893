"""The scaling plan: the model's arithmetic, its buckets against real DDP's,
the network fit, the recommendation, and the plan and compare commands."""

from __future__ import annotations

import argparse
import copy
import json

import pytest

from helpers.plan_profile import profile
from helpers.one_rank import one_rank_group
from workflow.helpers.stages import stage_config
from workflow.scripts.plan import plan, plan_tables
from workflow.scripts.settings import config as cfg, views
from workflow.scripts.settings.schema import derive, section_schema
from workflow.scripts.plan.scaling_model import (MB, Levers, Network, allreduce_seconds, buckets,
                                                   fit_network, predict)

NET = Network.stated(10, 50)  # 1.25e9 bytes/s, 50 us




def test_ring_allreduce_time():
    assert allreduce_seconds(1e9, 1, NET) == 0
    assert allreduce_seconds(1.25e9, 2, NET) == pytest.approx(1.0 + 2 * 50e-6)  # 2(N-1)/N = 1
    assert allreduce_seconds(1.25e9, 4, NET) == pytest.approx(1.5 + 6 * 50e-6)
    assert allreduce_seconds(1.25e9, 64, NET) < 2.0 + 126 * 50e-6 + 1e-9  # bandwidth term tends to 2 b/B


def test_buckets_close_once_they_reach_the_cap():
    grads = [[10 * MB, 0.1], [10 * MB, 0.2], [10 * MB, 0.3], [1 * MB, 0.4], [40 * MB, 0.5]]
    assert buckets(grads, 25) == [(30 * MB, 0.3), (41 * MB, 0.5)]
    assert buckets(grads, 5) == [(10 * MB, 0.1), (10 * MB, 0.2), (10 * MB, 0.3), (41 * MB, 0.5)]


def test_one_node_is_compute_alone_and_more_nodes_pay_the_exposed_tail():
    p = profile()
    one = predict(p, NET, 1)
    assert (one.seconds, one.communication, one.samples_per_second) == (3.5, 0.0, 32 / 3.5)
    four = predict(p, NET, 4)
    # 25 MB buckets: (30 MB ready at 1 s), (30 MB at 2 s), (40 MB at 2 s); the first is done long
    # before backward ends, the other two both come after it
    assert buckets(p.grads, 25) == [(30 * MB, 1.0), (30 * MB, 2.0), (40 * MB, 2.0)]
    tail = allreduce_seconds(30 * MB, 4, NET) + allreduce_seconds(40 * MB, 4, NET)
    assert four.exposed == pytest.approx(tail, rel=1e-9)
    assert four.communication == pytest.approx(sum(allreduce_seconds(b, 4, NET) for b, _ in buckets(p.grads, 25)))
    assert four.overlap == pytest.approx(four.communication - four.exposed)
    assert four.seconds == pytest.approx(3.5 + four.exposed + allreduce_seconds(4096, 4, NET) * 1.1)
    assert four.samples == 128


def test_levers_change_what_they_should():
    p = profile()
    plain, fp16 = predict(p, NET, 8), predict(p, NET, 8, Levers(compression="fp16"))
    assert fp16.exposed < plain.exposed and fp16.compute == plain.compute
    acc = predict(p, NET, 8, Levers(accumulation=4))
    assert acc.compute == pytest.approx(4 * 3.0 + 0.5) and acc.exposed == pytest.approx(plain.exposed)
    assert acc.samples == 4 * plain.samples
    free = profile(compress_seconds_per_byte={})  # PowerSGD sends 1% of the bytes, but its work counts
    assert predict(free, NET, 8, Levers(compression="powersgd")).exposed < predict(free, NET, 8, Levers(
        compression="fp16")).exposed < plain.exposed
    assert predict(p, NET, 8, Levers(compression="powersgd")).exposed > fp16.exposed
    with pytest.raises(ValueError, match="compression 'zip'"):
        Levers(compression="zip")


def test_stated_step_time_keeps_the_shape():
    p = profile().scaled_to(7.0)
    assert p.step == pytest.approx(7.0) and p.backward == pytest.approx(4.0) and p.grads[-1][1] == pytest.approx(4.0)


def test_network_fit_recovers_bandwidth_and_latency():
    truth = Network.stated(1, 120)
    points = [{"ranks": w, "bytes": b, "seconds": allreduce_seconds(b, w, truth) * (1.02 if i % 2 else 0.98)}
              for w in (2, 3, 4) for i, b in enumerate((4e3, 64e3, 1e6, 4e6, 16e6))]
    net = fit_network(points)
    assert net.gbit == pytest.approx(1, rel=0.05) and net.latency == pytest.approx(120e-6, rel=0.3)
    with pytest.raises(ValueError, match="two sizes"):
        fit_network(points[:1])


def test_recommendation_and_where_efficiency_falls():
    rows = plan_tables.predictions(profile(), [Network.stated(1, 50)], 16)
    [rec] = plan_tables.recommend(rows, 0.9)
    plain = [r for r in rows if r["levers"] == "no levers"]
    assert rec["nodes_without_levers"] == plan_tables.nodes_at(plain, 0.9)
    assert rec["nodes"] >= rec["nodes_without_levers"]
    assert all(r["efficiency"] >= 0.9 for r in rows if r["levers"] == rec["levers"] and r["nodes"] <= rec["nodes"])
    low = rec["below_75"]["no levers"]
    assert low is None or plain[low - 1]["efficiency"] < 0.75 <= plain[low - 2]["efficiency"]


def test_the_plan_defaults_are_the_schema_s(monkeypatch):
    """Without a configuration the plan's options are the schema's plan
    section (its typed view), not values of the plan's own."""
    schema = section_schema("plan")
    assert plan.settings(None, argparse.Namespace()) == {k: s["default"] for k, s in schema["properties"].items()}
    changed = copy.deepcopy(schema)
    changed["properties"]["latency_us"]["default"] = 7
    changed["properties"]["bandwidth_gbit"]["default"] = [100]
    monkeypatch.setattr(plan, "PlanSettings", derive("PlanSettings", changed, {}, module=views.__name__))
    chosen = plan.settings(None, argparse.Namespace(max_nodes=4))
    assert (chosen["latency_us"], chosen["bandwidth_gbit"], chosen["max_nodes"]) == (7, [100], 4)


def test_the_plan_reads_its_slice_as_the_plan_view(tmp_path, capsys):
    """The workflow's plan slice becomes the plan stage's view once, in
    main; its plan section, then the command line, set the options."""
    config = cfg.validate({
        "experiment": "e", "task": "mrpc", "model": "m", "distributed": {"hostfile": "h"},
        "sweep": {"nodes": [1, 2, 4]}, "plan": {"bandwidth_gbit": [10], "max_nodes": 8},
        "published": {"source": "s", "figures": {"n2": {"speedup": 1.7}, "n4": {"speedup": 3.0}}}})
    (tmp_path / "plan.json").write_text(json.dumps(stage_config("plan", config)))
    (tmp_path / "profile.json").write_text(json.dumps({**profile().to_dict(), "model": "m", "seq_len": 128}))
    view = plan.read_config(str(tmp_path / "plan.json"))
    assert isinstance(view, views.PlanView)
    made = plan.make_plan(profile().to_dict(), view, plan.settings(view, argparse.Namespace(latency_us=20.0)), None)
    assert made["title"] == "e" and made["published_efficiency"] == {2: 0.85, 4: 0.75}
    assert {k: made["settings"][k] for k in ("bandwidth_gbit", "latency_us", "max_nodes", "target_efficiency")} == {
        "bandwidth_gbit": [10], "latency_us": 20.0, "max_nodes": 8, "target_efficiency": 0.9}
    plan.main(["--profile", str(tmp_path / "profile.json"), "--config", str(tmp_path / "plan.json"),
               "--latency-us", "20"])
    assert "10 Gbit/s, 20 us" in capsys.readouterr().out


def test_model_buckets_match_real_ddp(tiny_model_dir):
    """The bucket sizes the model forms from a measured profile are the
    ones DDP itself reduces (after its first-step rebuild), any cap."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from workflow.scripts.plan import profile as measure
    from workflow.scripts.train.comm import CommTimer

    model = measure.build_model(str(tiny_model_dir), "mrpc")
    batch = measure.random_batch(model, 4, 16, qa=False)
    grads = measure.measure(model, batch, steps=2, warmup=1, precision="fp32")["grads"]
    for cap_mb in (0.05, 1.0, 25.0):
        with one_rank_group():  # left once the DDP model is gone
            ddp = DDP(measure.build_model(str(tiny_model_dir), "mrpc"), gradient_as_bucket_view=True,
                      bucket_cap_mb=cap_mb)
            timer = CommTimer(warmup=1)
            ddp.register_comm_hook(timer, CommTimer.hook)
            for _ in range(4):
                timer.begin_update()
                timer.backward(ddp(**batch).loss)
            seen = [b["bytes"] for b in timer.step_split()["buckets"]]
            del ddp
        assert seen == [b for b, _ in buckets(grads, cap_mb)], cap_mb
    assert torch.get_num_threads() >= 1


def test_bf16_master_profiles_half_the_gradient_bytes(tiny_model_dir):
    """The plan models bf16_master's all-reduce: its encoder gradients are
    bf16, half the bytes of fp32's (the fp32 head's stay whole)."""
    from workflow.scripts.plan import profile as measure

    model = measure.build_model(str(tiny_model_dir), "mrpc")
    batch = measure.random_batch(model, 4, 16, qa=False)
    full = sum(b for b, _ in measure.measure(model, batch, steps=1, warmup=0, precision="fp32")["grads"])
    model = measure.build_model(str(tiny_model_dir), "mrpc")
    half = sum(b for b, _ in measure.measure(model, batch, steps=1, warmup=0, precision="bf16_master")["grads"])
    head = sum(p.numel() * 4 for p in model.classifier.parameters())
    assert half == (full - head) // 2 + head


@pytest.mark.parametrize("model_code, lora, taken", [("auto", None, "cpuddp"), ("transformers", None, "transformers"),
                                                     ("auto", {"r": 4}, "transformers")])
def test_the_profile_measures_the_model_code_training_takes(tiny_model_dir, model_code, lora, taken):
    """plan/profile.py builds the model as train/state.py does: cpuddp's
    encoder where train.model_code auto picks it, transformers' under LoRA."""
    from workflow.scripts.plan import profile as measure
    from workflow.scripts.settings import config as cfg
    from workflow.scripts.settings.views import PlanView

    config = PlanView.pick(cfg.validate({
        "task": "mrpc", "model": str(tiny_model_dir),
        "train": {"model_code": model_code, "lora": lora, "batch_size": 4, "max_seq_length": 16, "precision": "fp32",
                  "ipex": False},
        "distributed": {"processes_per_node": 1, "threads_per_process": 1}}))
    result = measure.profile(config, None, steps=1, warmup=0)
    assert result["model_code"] == taken and result["grads"] and result["forward"] > 0
