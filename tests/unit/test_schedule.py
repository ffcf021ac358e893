"""train/schedule.py gives transformers' learning rates, step by step."""

import pytest
import torch
from transformers import get_scheduler

from workflow.scripts.train import schedule


@pytest.mark.parametrize("name", sorted(schedule.SCHEDULES))
@pytest.mark.parametrize("warmup, total", [(0, 10), (3, 10), (10, 10), (4, 1)])
def test_the_same_rates_as_transformers(name, warmup, total):
    def rates(make):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        sched = make(name, optimizer, warmup, total)
        out = []
        for _ in range(total + 3):
            out.append(sched.get_last_lr()[0])
            optimizer.step()
            sched.step()
        return out

    assert rates(schedule.scheduler) == rates(get_scheduler)


def test_the_schema_names_only_schedules_it_has():
    from workflow.scripts.settings import schema

    enum = schema.section_schema("train", "lr_scheduler_type")["enum"]
    assert set(enum) == set(schedule.SCHEDULES)
