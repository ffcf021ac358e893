"""cpuddp's training defaults are the transformers Trainer's (run_glue's
recipe), read from a real TrainingArguments, not from numbers copied here."""

from __future__ import annotations

import pytest
import torch
import yaml
from transformers import TrainingArguments

from helpers.one_rank import one_rank_group
from helpers.workflow import REPO
from workflow.scripts.settings.views import TrainSettings
from workflow.scripts.train.state import make_optimizer

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
TRAIN = SCHEMA["properties"]["train"]["properties"]
# cpuddp key -> TrainingArguments attribute (transformers 5 folds warmup_ratio
# into warmup_steps: a value below 1 is a ratio)
SAME_AS_TRAINER = {"max_grad_norm": "max_grad_norm", "adam_beta1": "adam_beta1", "adam_beta2": "adam_beta2",
                   "adam_epsilon": "adam_epsilon", "weight_decay": "weight_decay", "warmup_ratio": "warmup_steps",
                   "lr_scheduler_type": "lr_scheduler_type"}


@pytest.fixture(scope="module")
def trainer_args(tmp_path_factory):
    return TrainingArguments(output_dir=str(tmp_path_factory.mktemp("trainer")), report_to=[])


@pytest.mark.parametrize("key, attribute", SAME_AS_TRAINER.items())
def test_schema_default_is_the_trainers(trainer_args, key, attribute):
    theirs = getattr(trainer_args, attribute)
    theirs = getattr(theirs, "value", theirs)  # enums (lr_scheduler_type) by their name
    assert TRAIN[key]["default"] == theirs
    assert getattr(TrainSettings(), key) == TRAIN[key]["default"]


def test_the_optimizer_is_built_with_those_settings():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    settings = TrainSettings(weight_decay=0.01, adam_beta1=0.8, adam_epsilon=1e-6, warmup_ratio=0.5)
    optimizer, scheduler = make_optimizer(model, settings, total_steps=10)
    decayed, undecayed = optimizer.param_groups  # bias and LayerNorm are not decayed, as in the Trainer
    assert decayed["betas"] == (0.8, 0.999) and decayed["eps"] == 1e-6 and decayed["weight_decay"] == 0.01
    assert undecayed["weight_decay"] == 0.0 and len(undecayed["params"]) == 3
    assert scheduler.get_last_lr()[0] == 0.0  # warming up over 5 of the 10 steps


def one_update(max_grad_norm: float) -> tuple[torch.Tensor, float]:
    """One train_step of a 1-rank DDP model whose gradient norm is 20; (weight after, norm seen)."""
    import contextlib

    from torch.nn.parallel import DistributedDataParallel as DDP

    from workflow.scripts.train.comm import CommTimer
    from workflow.scripts.train.loop import train_step
    from workflow.scripts.train.state import TrainingState

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(4))

        def forward(self, x):
            return type("Out", (), {"loss": (self.w * x).sum()})()

    def update() -> tuple[torch.Tensor, float]:  # the DDP model lives here, gone before the group is
        model = Model()
        comm = CommTimer()
        ddp = DDP(model)
        ddp.register_comm_hook(comm, CommTimer.hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        seen = []
        optimizer.register_step_pre_hook(lambda *_: seen.append(float(model.w.grad.norm())))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        t = TrainingState(ddp, model, optimizer, scheduler, None, None, contextlib.nullcontext, comm, 1, max_grad_norm)
        train_step(t, [{"x": torch.full((4,), 10.0)}])  # gradient (10, 10, 10, 10): norm 20
        return model.w.detach().clone(), seen[0]

    with one_rank_group():
        return update()


def test_gradients_are_clipped_to_max_grad_norm_before_the_update():
    weight, norm = one_update(1.0)
    assert norm == pytest.approx(1.0, rel=1e-5) and torch.allclose(weight, torch.full((4,), -0.5), atol=1e-5)
    weight, norm = one_update(0.0)  # off
    assert norm == pytest.approx(20.0) and torch.allclose(weight, torch.full((4,), -10.0))
