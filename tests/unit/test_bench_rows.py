"""bench/train_bench.py's cpuddp rows: a lever's own row only where cpuddp's
encoder reads it, each row on the model code it trained (no training)."""

from __future__ import annotations

import pytest

from bench import train_bench
from helpers.tiny_family import tiny_hf
from workflow.scripts.settings import levers
from workflow.scripts.train import model_code, speed


def encoder_status(chosen: levers.Levers) -> dict[str, str]:
    model, choice = model_code.build("auto", tiny_hf("Bert", "classification"), False, False, chosen)
    assert choice.code == "cpuddp"
    return speed.apply(model, chosen)[1]


@pytest.mark.parametrize("name", train_bench.ENCODER_IGNORES_ALONE)
def test_the_levers_left_alone_change_nothing_on_the_encoder(name):
    """Each lever the bench gives no row of its own builds, alone, the encoder
    of the levers-off row: the same modules and the same statuses."""
    off = levers.all_off()
    alone = levers.each_alone()[name]
    assert encoder_status(alone) == {**encoder_status(off), name: encoder_status(alone)[name]}
    assert not encoder_status(alone)[name].startswith("on")
    built = [model_code.build("auto", tiny_hf("Bert", "classification"), False, False, c)[0] for c in (off, alone)]
    assert built[0].choices == built[1].choices
    assert built[0].encoder.first_token_only == built[1].encoder.first_token_only


def test_every_other_lever_has_its_row_and_the_defaults_are_autos_choice():
    rows = train_bench.lever_rows()
    alone = {name.split()[2] for name in rows if " only " in name}
    assert alone == set(levers.each_alone()) - set(train_bench.ENCODER_IGNORES_ALONE)
    assert rows["cpuddp (defaults)"] == levers.choose(levers.Levers())[0]
    assert rows["cpuddp, step levers off"] == levers.all_off()
