"""common/quiet.py: the third-party warnings no user can act on are silenced,
each with its reason; the same warning raised in cpuddp's own code is not."""

from __future__ import annotations

import warnings

import pytest

from helpers.one_rank import one_rank_group
from workflow.scripts.common import quiet


def raised_in(module: str, message: str, category=FutureWarning) -> list:
    """The warnings that reach the user when `module`'s code warns (filters as a step has them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.install()
        exec(compile(f"warnings.warn({message!r}, {category.__name__})", module, "exec"),
             {"__name__": module, "warnings": warnings, category.__name__: category})
    return caught


@pytest.mark.parametrize("entry", quiet.SILENCED, ids=lambda e: e[1][:30])
def test_each_silenced_warning_has_a_reason_and_is_silenced_only_from_its_library(entry):
    category, message, module, why = entry
    assert len(why.split()) >= 8  # a reason a reader can check, not a label
    text = message.replace("\\", "")
    assert raised_in("transformers.modeling_utils", text, category) == []
    assert [str(w.message) for w in raised_in("workflow.scripts.train.state", text, category)] == [text]


def test_other_warnings_still_reach_the_user():
    assert len(raised_in("transformers.modeling_utils", "something else is deprecated")) == 1


def ddp_of(model):
    """forward_sync_buffers of `model` under DDP as train/state.build wraps it (returns: the Reducer is gone)."""
    import torch

    from workflow.scripts.train import speed

    return torch.nn.parallel.DistributedDataParallel(model, **speed.buffer_sync(model)).forward_sync_buffers


def test_the_ddp_buffer_sync_uses_the_keyword_torch_does_not_deprecate(recwarn):
    """DDP built as train/state.build builds it warns nothing (torch 2.13: forward_sync_buffers)."""
    import torch

    from workflow.scripts.train import speed

    with one_rank_group():
        assert ddp_of(torch.nn.Linear(2, 2)) is False and ddp_of(torch.nn.BatchNorm1d(2)) is True
    assert speed.buffer_sync(torch.nn.Linear(2, 2)) == {"forward_sync_buffers": False}
    assert not [w for w in recwarn if "broadcast_buffers" in str(w.message)]
