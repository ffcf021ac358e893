"""Tuning bursts (train/tune.py) are deleted when tuning ends, whatever the
outcome: each holds a saved model. A failed burst keeps only its rank logs,
which its line names, and drops its layout alone: the tuning goes on, and
with every burst failed the run takes the fallback layout (uncached)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import datasets
import pytest

from workflow.scripts.common.errors import UserError
from workflow.scripts.settings import layout
from workflow.scripts.train import tune


def fake_training(fail_at: int | None = None, error: type[BaseException] = UserError):
    """run_training that writes what a burst writes (a model, logs), and fails at burst `fail_at`."""
    calls = []

    def run_training(config, data, work, what):
        calls.append(work)
        (work / "model").mkdir()
        (work / "model/model.safetensors").write_bytes(b"weights")
        (work / "logs").mkdir()
        (work / "logs/rank0.log").write_text("rank 0 said")
        if len(calls) - 1 == fail_at or fail_at == "all":
            raise error("tuning burst failed with 2 ranks: see logs")
        return {}, {"train_samples_per_second": 1.0, "steady_samples_per_second": 10.0 * len(calls)}

    return run_training, calls


@pytest.fixture
def tuning(monkeypatch, tmp_path):
    """main()'s arguments on a 2-core node; the SIGTERM handler main sets is put back after."""
    monkeypatch.setattr(tune.hardware, "cpu_summary", lambda: {"cpu_model": "Test CPU"})
    monkeypatch.setattr(tune.hardware, "usable_cores", lambda summary: 2)
    config = {"task": "mrpc", "model": "m",
              "distributed": {"nodes": 1, "hostfile": None, "processes_per_node": 1, "threads_per_process": 2},
              "train": {"max_steps": None, "checkpoint_every": 0, "log_every": 1, "batch_size": 8,
                        "max_seq_length": 16}}
    (tmp_path / "train.json").write_text(json.dumps(config))
    rows = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in (3, 5, 9)]})
    datasets.DatasetDict({"train": rows}).save_to_disk(str(tmp_path / "tok"))
    out = tmp_path / "tune" / "layout.json"
    previous = signal.getsignal(signal.SIGTERM)
    yield ["--config", str(tmp_path / "train.json"), "--data", str(tmp_path / "tok"), "--out", str(out),
           "--cache", str(tmp_path / "cache")], out
    signal.signal(signal.SIGTERM, previous)


def test_bursts_are_deleted_after_a_tuning_that_succeeds(monkeypatch, tuning):
    argv, out = tuning
    run_training, calls = fake_training()
    monkeypatch.setattr(tune, "run_training", run_training)
    tune.main(argv)
    assert len(calls) == 2 and json.loads(out.read_text())["best"]["processes_per_node"] == 2
    assert not (out.parent / "bursts").exists()


@pytest.mark.parametrize("error", [UserError, RuntimeError])
def test_a_failed_burst_drops_its_layout_with_a_line_and_the_tuning_goes_on(monkeypatch, tuning, error, capsys):
    argv, out = tuning
    run_training, calls = fake_training(fail_at=1, error=error)
    monkeypatch.setattr(tune, "run_training", run_training)
    tune.main(argv)
    first, failed = calls
    assert not first.exists()
    assert sorted(p.name for p in failed.iterdir()) == ["logs"]  # the failed burst's logs, named by its line
    assert (failed / "logs/rank0.log").read_text() == "rank 0 said"
    record = json.loads(out.read_text())
    assert [r["processes_per_node"] for r in record["table"]] == [1] and record["fallback"] is False
    assert record["best"] == {"processes_per_node": 1, "threads_per_process": 2, "batch_size": 8,
                              "gradient_accumulation_steps": 1}
    assert record["dropped"] == ["2 x 1: its burst failed (tuning burst failed with 2 ranks: see logs); dropped"]
    assert "tune: 2 x 1: its burst failed" in capsys.readouterr().err
    assert json.loads(Path(record["cache_file"]).read_text())["dropped"] == record["dropped"]


def test_with_every_burst_failed_the_run_takes_the_fallback_uncached(monkeypatch, tuning, tmp_path):
    argv, out = tuning
    run_training, calls = fake_training(fail_at="all")
    monkeypatch.setattr(tune, "run_training", run_training)
    tune.main(argv)
    record = json.loads(out.read_text())
    assert len(calls) == 2 and record["table"] == [] and record["fallback"] is True
    assert record["best"] == {"processes_per_node": 1, "threads_per_process": 2, "batch_size": 8,
                              "gradient_accumulation_steps": 1}  # one rank of every core, the batch as set
    assert record["cache_file"] is None and not (tmp_path / "cache").exists()  # the next run bursts again
    assert layout.reason(record).startswith("auto: 1 x 2 (ranks x threads), the fallback: no layout could be "
                                            "measured (1 x 2: its burst failed")


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_a_stopped_burst_ends_the_tuning_and_keeps_only_its_logs(monkeypatch, tuning, error):
    argv, out = tuning
    run_training, calls = fake_training(fail_at=1, error=error)
    monkeypatch.setattr(tune, "run_training", run_training)
    with pytest.raises(error):
        tune.main(argv)
    first, failed = calls
    assert not first.exists()
    assert sorted(p.name for p in failed.iterdir()) == ["logs"]
    assert not out.exists()


def test_an_earlier_tunings_saved_models_are_deleted_its_logs_kept(monkeypatch, tuning):
    argv, out = tuning
    earlier = out.parent / "bursts" / "burst-1x2-old"
    (earlier / "model").mkdir(parents=True)
    (earlier / "logs").mkdir()
    (out.parent / "bursts" / "burst-2x1-old" / "checkpoints").mkdir(parents=True)
    run_training, _ = fake_training()
    monkeypatch.setattr(tune, "run_training", run_training)
    tune.main(argv)
    assert sorted(p.name for p in (out.parent / "bursts").iterdir()) == ["burst-1x2-old"]
    assert [p.name for p in earlier.iterdir()] == ["logs"]


def test_a_sigterm_during_tuning_deletes_the_bursts_too(monkeypatch, tuning):
    import os

    argv, out = tuning
    run_training, calls = fake_training()

    def signalled(config, data, work, what):
        result = run_training(config, data, work, what)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # as Snakemake stops the job
        return result

    monkeypatch.setattr(tune, "run_training", signalled)
    with pytest.raises(SystemExit) as stop:
        tune.main(argv)
    assert stop.value.code == 128 + signal.SIGTERM
    assert not calls[0].exists() and sorted(p.name for p in calls[1].iterdir()) == ["logs"]


def test_each_burst_times_a_sample_of_the_epoch_s_lengths_at_its_split(monkeypatch, tuning, capsys):
    """Every burst is one epoch of the warm-up and AUTO_STEPS updates sampled
    across the data's lengths (train.sample_updates), at its layout's split
    of the same global batch; its steady rate is the layout's figure."""
    argv, out = tuning
    seen = []

    def run_training(config, data, work, what):
        seen.append((config["distributed"]["processes_per_node"], config["train"]))
        return {}, {"train_samples_per_second": 1.0, "steady_samples_per_second": 100.0 * len(seen)}

    monkeypatch.setattr(tune, "run_training", run_training)
    tune.main([*argv, "--auto"])
    assert [(ranks, train["batch_size"], train["gradient_accumulation_steps"]) for ranks, train in seen] == \
        [(1, 8, 1), (2, 4, 1)]
    assert all(train["sample_updates"] == tune.AUTO_STEPS and train["epochs"] == 1 and train["max_steps"] is None
               for _, train in seen)
    record = json.loads(out.read_text())
    assert [r["train_samples_per_second"] for r in record["table"]] == [100.0, 200.0]
    assert record["best"]["processes_per_node"] == 2
    assert f"over {tune.AUTO_STEPS} updates sampled across the epoch's lengths" in capsys.readouterr().err
