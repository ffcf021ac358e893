"""SIGTERM in a rank: Terminated outside the training loop; once Preempted
(a checkpoint written), a second SIGTERM is ignored so the rank still exits
75 (Slurm signals every job step, and the launcher forwards its own)."""

from __future__ import annotations

import os
import signal

import pytest

from workflow.scripts.common.errors import Preempted, Terminated, sigterm_raises


@pytest.fixture(autouse=True)
def keep_handler():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_sigterm_raises_terminated_and_the_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_raises():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


def test_after_preempted_a_second_sigterm_is_ignored():
    with pytest.raises(Preempted), sigterm_raises():
        raise Preempted("stopped at step 3")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGTERM)  # delivered for real: this process lives on
