"""The one-pass AdamW over an embedding table's active rows only
(MasterAdamW row_sparse, master_adamw.c adamw_bf16_rows): with weight decay
0 it gives the full update's bits, step after step, on one thread and
two, through clipping, a resume and a NaN; with weight decay it updates
every row; training's optimizer takes the model's embedding tables. Where
the rows a table's gradient can be non-zero in are known (row_hint: the
word embedding's all-reduce), the clip's sum of squares reads only them
(sum_squares_flagged_bf16) and the rows are marked without a scan, for the
same bits."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from helpers.bits import bits
from helpers.tiny_family import tiny_hf
from workflow.scripts.settings import levers
from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.settings.views import TrainSettings
from workflow.scripts.train import encoder, master, master_kernel, speed
from workflow.scripts.train.embedding_grad import GradPool
from workflow.scripts.train.master import MasterAdamW
from workflow.scripts.train.state import make_optimizer

ROWS, WIDTH = 2 * (master_kernel.CHUNK // 48) + 301, 48  # three chunks of whole rows, the last one short


@pytest.fixture(autouse=True)
def kernel(one_pass_kernel):
    if one_pass_kernel[0] is None:
        pytest.skip(f"the one-pass kernel did not build: {one_pass_kernel[1]}")
    return one_pass_kernel[0]


def model_params(seed: int = 0) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    """A bf16 table and a bf16 dense weight, equal for every seed."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(ROWS, WIDTH, generator=generator).bfloat16()
    dense = torch.randn(33, 17, generator=generator).bfloat16()
    return torch.nn.Parameter(table), torch.nn.Parameter(dense)


def touch(step: int, table, dense, rows: int = 400) -> torch.Tensor:
    """Gradients of a step that uses `rows` random rows of the table (a few
    rows every step, so some active rows get a zero gradient later)."""
    generator = torch.Generator().manual_seed(1000 + step)
    used = torch.cat([torch.randint(0, ROWS, (rows,), generator=generator), torch.arange(5)]).unique()
    grad = torch.zeros(ROWS, WIDTH)
    grad[used] = torch.randn(used.numel(), WIDTH, generator=generator)
    grad[used[:3], :7] = -0.0  # a zero's sign does not make a row active
    table.grad = grad.bfloat16()
    dense.grad = torch.randn(dense.shape, generator=generator).bfloat16()
    return used


def optimizer(table, dense, sparse: bool, weight_decay: float = 0.0, row_hint=None) -> MasterAdamW:
    return MasterAdamW([{"params": [table, dense], "weight_decay": weight_decay}], one_pass=True, lr=1e-3,
                       fused=True, row_sparse=[table] if sparse else (), row_hint=row_hint)


def state_of(opt: MasterAdamW, params) -> list[torch.Tensor]:
    masters = [m for p, m in opt.lowered]
    return ([p.detach().clone() for p in params] + [m.detach().clone() for m in masters]
            + [opt.state[m][k].clone() for m in masters for k in ("exp_avg", "exp_avg_sq")])


def step_both(step: int, pairs, clip: bool) -> None:
    for (table, dense), opt in pairs:
        touch(step, table, dense)
        if clip:
            opt.clip_grad_norm(0.5)
        opt.param_groups[0]["lr"] = 1e-3 * (1 + step % 3)
        opt.step()
        opt.zero_grad()


def assert_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    """Bit for bit: a zero's sign and a NaN's bits too."""
    assert all(torch.equal(bits(x), bits(y)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("threads", [1, 2])
def test_the_active_rows_update_is_the_full_update_bit_for_bit(threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        params = [model_params(), model_params()]
        sparse, full = optimizer(*params[0], sparse=True), optimizer(*params[1], sparse=False)
        touched = set()
        for step in range(6):
            touched |= set(touch(step, *params[0]).tolist())  # the rows this step uses
            step_both(step, [(params[0], sparse), (params[1], full)], clip=step % 2 == 1)
            assert_equal(state_of(sparse, params[0]), state_of(full, params[1]))
            assert_equal([p.detach() for p, _ in sparse.lowered], [m.detach().bfloat16() for _, m in sparse.lowered])
    finally:
        torch.set_num_threads(before)
    active = sparse.active[id(params[0][0])]
    assert int(active.sum()) == len(touched) < ROWS  # every row used so far, and only those
    assert sparse.rows_updated[1] == 6 * ROWS and 0 < sparse.rows_updated[0] < sparse.rows_updated[1]
    assert full.rows_updated == [0, 0]


def test_with_weight_decay_every_row_is_updated():
    """Decay moves a row whose gradient and moments are zero: no skipping."""
    params = [model_params(), model_params()]
    sparse = optimizer(*params[0], sparse=True, weight_decay=0.01)
    full = optimizer(*params[1], sparse=False, weight_decay=0.01)
    for step in range(2):
        step_both(step, [(params[0], sparse), (params[1], full)], clip=False)
    assert_equal(state_of(sparse, params[0]), state_of(full, params[1]))
    assert sparse.rows_updated == [0, 0]


def test_a_resumed_optimizer_takes_its_active_rows_from_the_moments():
    """Loaded from a checkpoint, the rows that moved before keep moving: the
    continued run equals the full update's bit for bit."""
    first, full_params = model_params(), model_params()
    saver, full = optimizer(*first, sparse=True), optimizer(*full_params, sparse=False)
    for step in range(3):
        step_both(step, [(first, saver), (full_params, full)], clip=False)
    again = model_params()
    for p, q in zip(again, first):
        p.data.copy_(q.data)
    loader = optimizer(*again, sparse=True)
    loader.load_state_dict(copy.deepcopy(saver.state_dict()))
    for step in range(3, 6):
        step_both(step, [(again, loader), (full_params, full)], clip=False)
    assert_equal(state_of(loader, again), state_of(full, full_params))


def test_a_nan_in_a_gradient_row_reaches_the_weights_as_in_the_full_update():
    params = [model_params(), model_params()]
    sparse, full = optimizer(*params[0], sparse=True), optimizer(*params[1], sparse=False)
    for (table, dense), opt in ((params[0], sparse), (params[1], full)):
        touch(0, table, dense)
        table.grad[ROWS - 1] = 0.0
        table.grad[ROWS - 1, 3] = float("nan")
        opt.step()
    assert torch.isnan(params[0][0][ROWS - 1, 3])  # a row no token used: marked by its NaN
    assert_equal(state_of(sparse, params[0]), state_of(full, params[1]))


def test_training_hands_the_embedding_tables_to_the_optimizer():
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification")
    master.to_bf16_encoder(model)
    decisions = RunDecisions("gloo", "bf16_master", 1, 1, 1,
                             levers=dataclasses.replace(levers.all_off(), optimizer="one_pass"))
    parts, _ = speed.apply(model, decisions.levers, speed.Parts(precision="bf16_master"))
    opt, _ = make_optimizer(model, TrainSettings(), 10, decisions, parts)
    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    assert opt.one_pass and opt.row_sparse == tables and len(tables) >= 2  # word, position (, token type)


@pytest.mark.parametrize("width", [48, 50, 7])
def test_the_flagged_sum_of_squares_is_the_whole_sum_bit_for_bit(kernel, width):
    """Rows across chunk boundaries, a width that is no multiple of 16, a
    last chunk with a tail, -0 in a left-out row: the same bits as reading
    every element, and a wrong flag (a non-zero row left out) shows."""
    rows = 2 * (master_kernel.CHUNK // width) + 37
    generator = torch.Generator().manual_seed(width)
    used = torch.randint(0, rows, (300,), generator=generator).unique()
    grad = torch.zeros(rows, width)
    grad[used] = torch.randn(used.numel(), width, generator=generator) * 1e3
    grad[rows // 2] = -0.0
    grad = grad.bfloat16()
    flags = torch.zeros(rows, dtype=torch.uint8).index_fill_(0, used, 1)
    whole = kernel.sum_squares_bf16([grad])
    assert whole == kernel.sum_squares_bf16([grad], [flags]) > 0
    assert whole == pytest.approx(math.fsum(grad[used].double().square().flatten().tolist()), rel=1e-12)
    flags[used[0]] = 0
    assert kernel.sum_squares_bf16([grad], [flags]) < whole


def test_with_the_rows_known_clipping_and_the_update_are_the_full_ones_bit_for_bit():
    """row_hint's rows (a superset of the non-zero ones, as the all-reduce's
    union is: a few rows with a zero gradient too) for clipping's sum and
    the active rows: the same states as the full update, step after step."""
    params = [model_params(), model_params()]
    known = {}
    hinted = optimizer(*params[0], sparse=True, row_hint=lambda grad: known.get(grad.data_ptr()))
    full = optimizer(*params[1], sparse=False)
    for step in range(4):
        for (table, dense), opt in ((params[0], hinted), (params[1], full)):
            used = touch(step, table, dense)
            extra = torch.tensor([ROWS - 1, ROWS - 2])  # rows no token used: zero gradients, marked anyway
            known.clear()
            known[table.grad.data_ptr()] = torch.cat([used, extra]).unique()
            opt.clip_grad_norm(0.5)
            opt.step()
            opt.zero_grad()
        assert_equal(state_of(hinted, params[0]), state_of(full, params[1]))
    assert int(hinted.active[id(params[0][0])][ROWS - 2:].sum()) == 2


def test_the_pool_knows_the_rows_of_the_reduced_table_only():
    pool = GradPool()
    table = torch.zeros(10, 4)
    rows = torch.tensor([1, 5])
    assert pool.rows_of(table) is None
    pool.adopt(table, rows)
    assert torch.equal(pool.rows_of(table), rows)
    assert pool.rows_of(torch.zeros(10, 4)) is None and pool.rows_of(table[:5]) is None
    pool.gradient(torch.zeros(10, 4), torch.tensor([2]), torch.ones(1, 4))  # the next backward
    assert pool.rows_of(table) is None
