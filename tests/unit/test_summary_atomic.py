"""summary.json entries and scaling, and the atomic file/folder writers."""

import json

import pytest

from workflow.scripts.report import summary
from workflow.scripts.common.atomic import atomic_dir, read_json, write_json

# The summary entry of DESIGN.md, "Results that users and tests read".
DESIGN_FIELDS = {"run", "nodes", "processes_per_node", "world_size", "threads_per_process", "backend", "mpi",
                 "precision", "epochs", "steps", "train_seconds", "train_samples_per_second", "final_loss",
                 "eval"}
EVAL_FP32 = {"accuracy": 0.81, "f1": 0.86, "samples_per_second": 250.0}


def fake_run(root, name, *, ppn, seconds, runtimes=None):
    run = root / name
    (run / "model").mkdir(parents=True)
    write_json(run / "environment.json", {
        "nodes": 1, "processes_per_node": ppn, "world_size": ppn, "threads_per_process": 2,
        "backend": "gloo", "precision": "fp32",
        "mpi": {"flavour": "intel", "version": "2021.17", "mpirun": "/x/mpirun"}})
    write_json(run / "train_metrics.json", {
        "world_size": ppn, "backend": "gloo", "precision": "fp32", "threads_per_process": 2, "epochs": 3,
        "steps": 300 // ppn, "steps_per_epoch": 100 // ppn, "train_samples": 4800,
        "train_seconds": seconds, "train_samples_per_second": round(4800 / seconds, 3), "final_loss": 0.25,
        "loss_history": [0.7, 0.25], "ranks": [{"rank": r, "peak_rss_mb": 900.0 + r} for r in range(ppn)]})
    write_json(run / "eval_fp32.json", EVAL_FP32)
    if runtimes is not None:
        write_json(run / "eval_runtimes.json", runtimes)
        write_json(run / "deploy" / "deploy.json", {"candidate": runtimes["deploy"]["candidate"]})
    return run


def test_run_entry_fields(tmp_path):
    run = fake_run(tmp_path, "default", ppn=2, seconds=60.0)
    entry = summary.run_entry("default", run)
    assert DESIGN_FIELDS <= set(entry)  # noqa: SIM300  (a subset check, not a Yoda condition)
    assert entry["run"] == "default"
    assert (entry["nodes"], entry["processes_per_node"], entry["world_size"]) == (1, 2, 2)
    assert entry["threads_per_process"] == 2
    assert entry["backend"] == "gloo" and entry["precision"] == "fp32"
    assert entry["mpi"] == "intel 2021.17"
    assert (entry["epochs"], entry["steps"]) == (3, 150)
    assert entry["train_seconds"] == 60.0
    assert entry["train_samples_per_second"] == 80.0
    assert entry["final_loss"] == 0.25
    assert entry["eval"] == {"fp32": EVAL_FP32, "fp32_openvino": None, "int8": None}
    assert entry["quantization"]["enabled"] is False and entry["deploy"] is None
    assert entry["peak_rss_mb_per_rank"] == [900.0, 901.0]


def test_side_by_side_evaluation_included_when_present(tmp_path):
    timed = {"samples_per_second": 100.0, "latency_ms_p50": 9.0, "latency_ms_p99": 12.0}
    openvino = {"accuracy": 0.81, "f1": 0.86, "samples_per_second": 300.0}
    int8 = {"accuracy": 0.8, "f1": 0.85, "samples_per_second": 600.0, "recommended": True}
    runtimes = {"eval": {"fp32": timed, "fp32_openvino": openvino, "int8": int8},
                "quantization": {"enabled": "auto", "note": "int8 recommended"},
                "deploy": {"candidate": "int8", "why": "fastest"}}
    run = fake_run(tmp_path, "q", ppn=1, seconds=10.0, runtimes=runtimes)
    entry = summary.run_entry("q", run)
    # eager fp32: evaluate_fp32's metrics, the side-by-side timing
    assert entry["eval"]["fp32"] == {**EVAL_FP32, **timed}
    assert entry["eval"]["fp32_openvino"] == openvino and entry["eval"]["int8"] == int8
    assert entry["quantization"] == runtimes["quantization"]
    assert entry["deploy"] == {"path": str(run / "deploy"), "candidate": "int8"}


def test_missing_fp32_eval_is_an_error(tmp_path):
    run = fake_run(tmp_path, "r", ppn=1, seconds=10.0)
    (run / "eval_fp32.json").unlink()
    with pytest.raises(FileNotFoundError):
        summary.run_entry("r", run)


def test_two_run_scaling(tmp_path):
    fake_run(tmp_path, "ppn1", ppn=1, seconds=100.0)
    fake_run(tmp_path, "ppn2", ppn=2, seconds=62.5)
    result = summary.summarize("exp", tmp_path, ["ppn1", "ppn2"])
    assert result["experiment"] == "exp"
    base, two = result["runs"]
    assert [base["run"], two["run"]] == ["ppn1", "ppn2"]
    assert (base["speedup"], base["scaling_efficiency"]) == (1.0, 1.0)
    assert two["speedup"] == 1.6
    assert two["scaling_efficiency"] == 0.8


def test_main_writes_summary_json(tmp_path):
    results = tmp_path / "results" / "exp"
    fake_run(results, "ppn1", ppn=1, seconds=100.0)
    fake_run(results, "ppn2", ppn=2, seconds=50.0)
    out = results / "summary.json"
    summary.main(["--experiment", "exp", "--results", str(results), "--run", "ppn1", "--run", "ppn2",
                  "--out", str(out)])
    data = json.loads(out.read_text())
    assert [r["run"] for r in data["runs"]] == ["ppn1", "ppn2"]
    assert data["runs"][1]["scaling_efficiency"] == 1.0
    assert all(r["eval"]["int8"] is None for r in data["runs"])


# ---------------------------------------------------------------- write_json

def test_write_json_round_trip_without_temp_files(tmp_path):
    path = tmp_path / "new" / "out.json"
    write_json(path, {"a": [1, 2], "b": None})
    assert read_json(path) == {"a": [1, 2], "b": None}
    assert path.read_text().endswith("\n")
    assert [p.name for p in path.parent.iterdir()] == ["out.json"]


def test_write_json_overwrites(tmp_path):
    path = tmp_path / "out.json"
    write_json(path, {"v": 1})
    write_json(path, {"v": 2})
    assert read_json(path) == {"v": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_write_json_failure_keeps_old_file_and_no_temp(tmp_path):
    path = tmp_path / "out.json"
    write_json(path, {"v": 1})
    with pytest.raises(TypeError):
        write_json(path, {"v": 2, "bad": object()})  # fails half-way through serialization
    assert read_json(path) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_write_json_failure_creates_nothing(tmp_path):
    with pytest.raises(TypeError):
        write_json(tmp_path / "out.json", [1, 2, {3}])
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- atomic_dir

def test_atomic_dir_creates_on_success(tmp_path):
    target = tmp_path / "model"
    with atomic_dir(target) as tmp:
        assert tmp != target and tmp.parent == tmp_path
        (tmp / "weights.bin").write_text("new")
        assert not target.exists()  # nothing visible until the block ends
    assert (target / "weights.bin").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_atomic_dir_replaces_existing_on_success(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.bin").write_text("old")
    with atomic_dir(target) as tmp:
        (tmp / "new.bin").write_text("new")
        assert (target / "old.bin").exists()
    assert sorted(p.name for p in target.iterdir()) == ["new.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_atomic_dir_keeps_old_and_cleans_up_on_exception(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "old.bin").write_text("old")
    with pytest.raises(RuntimeError, match="boom"), atomic_dir(target) as tmp:
        (tmp / "half.bin").write_text("partial")
        raise RuntimeError("boom")
    assert sorted(p.name for p in target.iterdir()) == ["old.bin"]
    assert (target / "old.bin").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_atomic_dir_exception_leaves_nothing_new(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic_dir(tmp_path / "model") as tmp:
        (tmp / "x").write_text("x")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
