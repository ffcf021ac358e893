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
