"""Tuning bursts (train/tune.py) are deleted when tuning ends, whatever the
outcome: each holds a saved model. A failed burst keeps only its rank logs,
which its error names."""

from __future__ import annotations

import json
import signal

import pytest

from workflow.scripts.common.errors import UserError
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
        if len(calls) - 1 == fail_at:
            raise error("tuning burst failed with 2 ranks: see logs")
        return {}, {"train_samples_per_second": 10.0 * len(calls)}

    return run_training, calls


@pytest.fixture
def tuning(monkeypatch, tmp_path):
    """main()'s arguments on a 2-core node; the SIGTERM handler main sets is put back after."""
    monkeypatch.setattr(tune.hardware, "cpu_summary", lambda: {"cpu_model": "Test CPU"})
    monkeypatch.setattr(tune.hardware, "usable_cores", lambda summary: 2)
    config = {"task": "mrpc", "model": "m",
              "distributed": {"nodes": 1, "hostfile": None, "processes_per_node": 1, "threads_per_process": 2},
              "train": {"max_steps": None, "checkpoint_every": 0, "log_every": 1}}
    (tmp_path / "train.json").write_text(json.dumps(config))
    out = tmp_path / "tune" / "layout.json"
    previous = signal.getsignal(signal.SIGTERM)
    yield ["--config", str(tmp_path / "train.json"), "--data", "tok", "--out", str(out),
           "--cache", str(tmp_path / "cache")], out
    signal.signal(signal.SIGTERM, previous)


def test_bursts_are_deleted_after_a_tuning_that_succeeds(monkeypatch, tuning):
    argv, out = tuning
    run_training, calls = fake_training()
    monkeypatch.setattr(tune, "run_training", run_training)
    tune.main(argv)
    assert len(calls) == 2 and json.loads(out.read_text())["best"]["processes_per_node"] == 2
    assert not (out.parent / "bursts").exists()


@pytest.mark.parametrize("error", [UserError, KeyboardInterrupt, SystemExit])
def test_a_failed_burst_keeps_only_its_logs_and_the_others_are_gone(monkeypatch, tuning, error):
    argv, out = tuning
    run_training, calls = fake_training(fail_at=1, error=error)
    monkeypatch.setattr(tune, "run_training", run_training)
    with pytest.raises(error):
        tune.main(argv)
    first, failed = calls
    assert not first.exists()
    assert sorted(p.name for p in failed.iterdir()) == ["logs"]
    assert (failed / "logs/rank0.log").read_text() == "rank 0 said"
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
