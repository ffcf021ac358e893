"""make bench's whole-run pairs and step breakdown: the global batch per
task (never the layout's), the training counts, and the op kinds the step
is split into (no processes, no training)."""

from __future__ import annotations

from bench import glue_runs, real_lengths, step_breakdown


def test_the_global_batch_is_the_tasks_whatever_the_layout():
    assert glue_runs.GLOBAL_BATCH["mrpc"] == 32 and glue_runs.GLOBAL_BATCH["sst2"] == 64
    for task, batch in glue_runs.GLOBAL_BATCH.items():
        assert all(batch % ranks == 0 for ranks, _ in glue_runs.LAYOUTS.values()), task  # every layout splits it


def test_a_task_trains_its_real_count_unless_cut():
    assert glue_runs.train_size("mrpc", None) == real_lengths.table("mrpc")["pairs"] == 3667
    assert glue_runs.train_size("sst2", None) == 16384 and glue_runs.train_size("sst2", 67349) == 67349


def test_each_op_has_one_kind():
    assert step_breakdown.kind("aten::mm") == step_breakdown.kind("aten::addmm") == "matmul"
    assert step_breakdown.kind("PackedAttention") == step_breakdown.kind("aten::bmm") == "attention"
    assert step_breakdown.kind("aten::embedding_dense_backward") == "embedding"
    assert step_breakdown.kind("aten::gelu") == step_breakdown.kind("aten::native_layer_norm") == "elementwise"


def test_auto_bursts_reads_each_burst_against_the_whole_run_of_its_round_and_layout():
    from bench import auto_bursts

    rounds = [{"2 x 1": {"sampled burst": 330.0, "first-batches burst": 360.0, "whole run": 300.0},
               "1 x 2": {"sampled burst": 290.0, "first-batches burst": 370.0, "whole run": 290.0}},
              {"1 x 2": {"sampled burst": 310.0, "first-batches burst": 330.0, "whole run": 310.0},
               "2 x 1": {"sampled burst": 300.0, "first-batches burst": 340.0, "whole run": 300.0}}]
    fastest, sampled, first = auto_bursts.summary(rounds)
    assert fastest == "whole runs fastest at: 2 x 1, 1 x 2 (round by round)"
    assert sampled.startswith("sampled burst: reads 1.00x the whole run (median; 1.00-1.10); picks 2 x 1, 1 x 2: "
                              "the whole runs' fastest in 2 of 2 rounds")
    assert "first-batches burst: reads 1.17x" in first and "picks 1 x 2, 2 x 1" in first and "in 0 of 2" in first


def test_a_first_batches_burst_is_the_epochs_first_updates_unsampled():
    from bench import auto_bursts, train_bench
    from workflow.scripts.train import tune
    from workflow.scripts.train.loop import WARMUP_STEPS

    base = train_bench.full_config("model", None, "auto", layout=(1, 2), global_batch=32, epochs=1)
    row = {"processes_per_node": 2, "threads_per_process": 1, "batch_size": 16, "gradient_accumulation_steps": 1}
    sampled, first = tune.burst_config(base, row, 24), auto_bursts.first_batches(base, row, 24)
    assert sampled["train"]["sample_updates"] == 24 and first["train"]["sample_updates"] is None
    assert first["train"]["max_steps"] == WARMUP_STEPS + 24
    assert first["distributed"] == sampled["distributed"] and first["train"]["batch_size"] == 16
    whole = auto_bursts.at_layout(base, row)
    assert whole["train"]["batch_size"] == 16 and whole["distributed"]["processes_per_node"] == 2
    assert whole["train"].get("sample_updates") is None and whole["train"].get("max_steps") is None
