"""The oneCCL path without oneCCL: what cpuddp sets for ccl ranks, and the
bindings' source build refusing a missing or altered source.

The real build, and real ccl runs on it, are in test_intel_stack.py (the
Intel env, `make test-intel`).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "envs" / "torch-ccl" / "build.py"


def build(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BUILD), "--venv", "/nonexistent", "--check-only", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=60)


def test_build_refuses_a_missing_source(tmp_path):
    done = build("--source", str(tmp_path / "none.tar.gz"), "--sha256", "0" * 64)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: torch-ccl source not found (looked for ") and "CCL_SRC=" in line


def test_build_refuses_an_altered_source(tmp_path):
    source = tmp_path / "torch-ccl-1fc0c38.tar.gz"
    source.write_bytes(b"not the original")
    done = build("--source", str(source), "--sha256", "0" * 64)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    actual = hashlib.sha256(b"not the original").hexdigest()
    assert f"has sha256 {actual}, expected {'0' * 64}: the file is altered" in line


def test_build_takes_the_fallback_when_the_first_place_is_empty(tmp_path):
    source = tmp_path / "copy.tar.gz"
    source.write_bytes(b"x")
    done = build("--source", str(tmp_path / "none.tar.gz"), "--fallback", str(source),
                 "--sha256", hashlib.sha256(b"x").hexdigest())
    assert done.returncode == 0 and "sha256 ok" in done.stdout


def test_make_checks_the_source_before_building(tmp_path):
    """With an altered CCL_SRC, `make intel-venv` stops at once (nothing installed) with one line.
    The check needs no Intel env: this interpreter stands in for its python3.11
    (INTEL_PY), so `make test`, which has no python3.11, runs it too."""
    source = tmp_path / "bad.tar.gz"
    source.write_bytes(b"altered")
    venv = tmp_path / "intel-venv"
    done = subprocess.run(["make", "--no-print-directory", "intel-venv", f"INTEL_VENV={venv}", f"CCL_SRC={source}",
                           f"INTEL_PY={sys.executable}"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode != 0 and not venv.exists()
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the file is altered" in errors[0], done.stderr
