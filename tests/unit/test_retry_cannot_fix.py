"""A try that stopped on a UserError in a rank is not tried again (launch/verdict.py, launch/tries.py)."""

import json

import pytest

from workflow.scripts.common.errors import RetryCannotFix, UserError
from workflow.scripts.launch import tries
from workflow.scripts.launch.verdict import retry_cannot_fix

OK = {"status": "ok"}


@pytest.mark.parametrize("statuses, hopeless", [
    ([{"status": "error", "error": "UserError: model folder 'x' has no weights"}, OK], True),
    ([{"status": "error", "error": "RuntimeError: Connection closed by peer"},
      {"status": "error", "error": "UserError: the training split is empty"}], True),
    ([{"status": "error", "error": "UserError: no weights"}, {"status": "running"}], False),  # a rank died
    ([{"status": "error", "error": "RuntimeError: Connection closed by peer"}, {}], False),
    ([{"status": "preempted", "error": "stopped at step 4"}, OK], False),
])
def test_only_a_rank_s_user_error_with_no_rank_lost_is_hopeless(statuses, hopeless):
    assert retry_cannot_fix(statuses) is hopeless


def test_the_next_try_ends_at_once_with_the_first_try_s_line(tmp_path):
    path = tmp_path / "tries.json"
    with pytest.raises(RetryCannotFix), tries.recorded(path, 1, None, {}):
        raise RetryCannotFix("rank 0 on vm failed: UserError: no weights; log: try-1/rank0.log")
    for attempt in (2, 3):
        with pytest.raises(RetryCannotFix) as caught, tries.recorded(path, attempt, None, {}):
            tries.hopeless(path, attempt)
        assert str(caught.value) == (f"try {attempt} not started, a retry cannot fix this: "
                                     "rank 0 on vm failed: UserError: no weights; log: try-1/rank0.log")
    assert [t["retry_can_fix"] for t in json.loads(path.read_text())] == [False, False, False]


def test_a_retriable_failure_lets_the_next_try_start(tmp_path):
    path = tmp_path / "tries.json"
    with pytest.raises(UserError), tries.recorded(path, 1, None, {}):
        raise UserError("rank 1 on vm died without an exit status")
    tries.hopeless(path, 2)  # no error
    tries.hopeless(path, 1)  # a new workflow run starts a new record
