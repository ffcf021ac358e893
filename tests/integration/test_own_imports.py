"""A program started as `python -m workflow.scripts...` imports transformers
as transformers does: no import hook over its private functions (the next
transformers release may change them without notice), no cache of ours."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.workflow import REPO

# What workflow/scripts/__init__.py sees in a program started with -m, then transformers' import machinery.
AS_A_STEP = ("import sys; sys.argv[:1] = ['-m']; import workflow.scripts, transformers.utils.import_utils as utils; "
             "print(utils.define_import_structure.__module__, utils.define_import_structure.__qualname__)")


def test_a_step_leaves_transformers_import_machinery_its_own(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    # started with -m through the package, as every step, rank and launcher is
    done = subprocess.run([sys.executable, "-m", "workflow.scripts.train.rank", "--help"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "--config" in done.stdout, done.stderr
    assert not (tmp_path / "cache").exists()  # nothing of transformers kept between processes
    probe = subprocess.run([sys.executable, "-c", AS_A_STEP], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["transformers.utils.import_utils", "define_import_structure"]
