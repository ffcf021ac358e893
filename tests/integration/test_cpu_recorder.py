"""`make cpu-by-test`'s recorder (mk/cpu_by_test/): every Python process of
the command it runs leaves a line, an os._exit as well as a normal exit, with
the test that started it, and the tables add them up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "mk" / "cpu_by_test.py"


def test_every_python_process_of_the_command_is_recorded_with_its_test(tmp_path):
    log = tmp_path / "cpu.jsonl"
    child = "import os, subprocess, sys; subprocess.run([sys.executable, '-c', 'pass']); os._exit(3)"
    done = subprocess.run([sys.executable, str(TOOL), str(log), "--", sys.executable, "-c", child],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr  # the command's exit, passed on
    lines = [json.loads(text) for text in log.read_text().splitlines()]
    assert len(lines) == 2  # the child and its own child; the os._exit recorded too
    assert {line["test"].split(" (")[0].split("::")[-1] for line in lines} == {
        "test_every_python_process_of_the_command_is_recorded_with_its_test"}
    assert all(line["cpu"] >= 0 and line["torch"] is False for line in lines)
    assert "2 Python processes" in done.stdout and "exit 3" in done.stdout
    assert "test_cpu_recorder.py::test_every_python_process_of_the_command_is_recorded_with_its_test" in done.stdout


def test_without_the_log_variable_the_recorder_writes_nothing(tmp_path):
    env = {"PYTHONPATH": str(REPO / "mk" / "cpu_by_test"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", "import sitecustomize; print(sitecustomize.LOG)"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.stdout.strip() == "None" and not list(tmp_path.iterdir())
