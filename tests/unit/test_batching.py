"""Length-grouped distributed sampler and the collate functions: padded, and packed for cpuddp's encoder."""

import numpy as np
import pytest
import torch

from workflow.scripts.data.batching import DistributedLengthGroupedSampler as Sampler
from workflow.scripts.data.batching import packed_collate, pad_collate

LENGTHS = np.random.default_rng(1).integers(5, 500, size=1003)  # not a multiple of any global batch


def epoch(lengths, batch_size, world, epoch_no=0, **kwargs):
    """Every rank's batches for one epoch: list (rank) of lists (step) of indices."""
    out = []
    for rank in range(world):
        sampler = Sampler(lengths, batch_size, rank, world, **kwargs)
        sampler.set_epoch(epoch_no)
        out.append(list(sampler))
    return out


@pytest.mark.parametrize("group_by_length", [True, False])
@pytest.mark.parametrize("batch_size, world", [(8, 2), (16, 3), (7, 4), (32, 1)])
def test_equal_steps_of_exactly_batch_size(batch_size, world, group_by_length):
    ranks = epoch(LENGTHS, batch_size, world, group_by_length=group_by_length)
    expected_steps = -(-len(LENGTHS) // (batch_size * world))
    for batches in ranks:
        assert len(batches) == expected_steps
        assert all(len(b) == batch_size for b in batches)
    assert len(Sampler(LENGTHS, batch_size, 0, world)) == expected_steps


@pytest.mark.parametrize("group_by_length", [True, False])
def test_epoch_covers_every_index_with_wraparound_padding(group_by_length):
    ranks = epoch(LENGTHS, 8, 3, group_by_length=group_by_length)
    seen = [i for batches in ranks for b in batches for i in b]
    assert set(seen) == set(range(len(LENGTHS)))
    padding = len(seen) - len(LENGTHS)
    assert 0 <= padding < 8 * 3
    counts = np.bincount(seen, minlength=len(LENGTHS))
    assert counts.max() <= 2 and (counts == 2).sum() == padding


def test_ranks_share_each_step_without_overlap():
    ranks = epoch(LENGTHS, 8, 2)
    for step in range(len(ranks[0]) - 1):  # the last step may hold padding repeats
        assert not set(ranks[0][step]) & set(ranks[1][step])


def test_same_epoch_same_order_other_epoch_other_order():
    first = epoch(LENGTHS, 8, 2, epoch_no=1)
    assert first == epoch(LENGTHS, 8, 2, epoch_no=1)
    assert first != epoch(LENGTHS, 8, 2, epoch_no=2)
    assert first != epoch(LENGTHS, 8, 2, epoch_no=1, seed=7)


def test_batches_are_length_grouped():
    """The samples of one micro-step, over the ranks, have similar lengths."""
    grouped = epoch(LENGTHS, 8, 2, group_by_length=True)
    random = epoch(LENGTHS, 8, 2, group_by_length=False)

    def mean_spread(ranks):
        return np.mean([np.ptp(LENGTHS[np.concatenate(step)]) for step in zip(*ranks)])

    assert mean_spread(grouped) < 0.15 * mean_spread(random)  # the jitter (+-10%) spreads a group of 16


def test_ranks_get_similar_lengths_in_a_step():
    ranks = epoch(LENGTHS, 8, 2)
    gaps = [abs(LENGTHS[a].max() - LENGTHS[b].max()) for a, b in zip(*ranks)]
    assert np.mean(gaps) < 0.05 * np.ptp(LENGTHS)


def test_sampler_in_a_dataloader():
    data = [{"input_ids": [1] * n} for n in LENGTHS[:40]]
    sampler = Sampler(LENGTHS[:40], 4, 0, 2)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=pad_collate(0))
    batches = list(loader)
    assert len(batches) == 5
    assert all(b["input_ids"].shape[0] == 4 for b in batches)


def test_tiny_dataset_still_gives_full_batches():
    ranks = epoch([5, 6, 7], 4, 2)
    for batches in ranks:
        assert [len(b) for b in batches] == [4]


def test_pad_collate():
    rows = [
        {"input_ids": [101, 7, 102], "attention_mask": [1, 1, 1], "token_type_ids": [0, 0, 1], "labels": 1},
        {"input_ids": [101, 102], "attention_mask": [1, 1], "token_type_ids": [0, 0], "labels": 0},
    ]
    batch = pad_collate(pad_token_id=9)(rows)
    assert batch["input_ids"].tolist() == [[101, 7, 102], [101, 102, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 1], [0, 0, 0]]
    assert batch["labels"].tolist() == [1, 0]
    assert batch["input_ids"].dtype == torch.int64


def test_pad_collate_keeps_float_labels_and_other_fields():
    rows = [{"input_ids": [1], "labels": 0.5, "start_positions": 3},
            {"input_ids": [1, 2], "labels": 4.25, "start_positions": 0}]
    batch = pad_collate(0)(rows)
    assert batch["labels"].dtype.is_floating_point
    assert batch["labels"].tolist() == [0.5, 4.25]
    assert batch["start_positions"].tolist() == [3, 0]
    assert set(batch) == {"input_ids", "labels", "start_positions"}


def test_packed_collate_puts_real_tokens_end_to_end_longest_first():
    rows = [{"input_ids": [101, 102], "attention_mask": [1, 1], "token_type_ids": [0, 0], "labels": 0,
             "start_positions": 1},
            {"input_ids": [101, 7, 8, 102], "attention_mask": [1] * 4, "token_type_ids": [0, 0, 1, 1], "labels": 1,
             "start_positions": 2},
            {"input_ids": [101, 5, 102], "attention_mask": [1] * 3, "token_type_ids": [0, 1, 1], "labels": 2,
             "start_positions": 0},
            {"input_ids": [101, 6, 102], "attention_mask": [1] * 3, "token_type_ids": [0, 0, 1], "labels": 3,
             "start_positions": 2}]
    batch = packed_collate()(rows)
    assert set(batch) == {"input_ids", "token_type_ids", "labels", "start_positions", "cu_seqlens"}
    assert batch["input_ids"].tolist() == [101, 7, 8, 102, 101, 5, 102, 101, 6, 102, 101, 102]
    assert batch["token_type_ids"].tolist() == [0, 0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0]
    assert batch["cu_seqlens"].tolist() == [0, 4, 7, 10, 12]
    assert batch["labels"].tolist() == [1, 2, 3, 0]  # each row's own, in the packed order (ties as they came)
    assert batch["start_positions"].tolist() == [2, 0, 2, 1]
    assert batch["input_ids"].dtype == batch["cu_seqlens"].dtype == torch.int64


def test_packed_collate_multi_hot_labels():
    rows = [{"input_ids": [1], "labels": [0, 2]}, {"input_ids": [1, 2], "labels": [1]}]
    assert packed_collate(num_labels=3)(rows)["labels"].tolist() == [[0, 1, 0], [1, 0, 1]]


def test_resume_starts_mid_epoch_on_the_same_order():
    """A resumed run continues the epoch's seeded order without producing the
    batches it has already trained."""
    full = epoch(LENGTHS, 8, 2, epoch_no=3)
    for rank in range(2):
        sampler = Sampler(LENGTHS, 8, rank, 2)
        sampler.set_epoch(3, start=17)
        assert list(sampler) == full[rank][17:]
        assert len(sampler) == len(full[rank])  # steps per epoch are unchanged
        sampler.set_epoch(4)
        assert list(sampler) == epoch(LENGTHS, 8, 2, epoch_no=4)[rank]


def updates_of(lengths, global_batch, world, accumulation, epoch_no=0, **kwargs):
    """The samples of each update (over every rank and micro-step) for one split."""
    batch = global_batch // (world * accumulation)
    per_rank = []
    for rank in range(world):
        sampler = Sampler(lengths, batch, rank, world, accumulation=accumulation, **kwargs)
        sampler.set_epoch(epoch_no)
        per_rank.append(list(sampler))
    steps = len(per_rank[0]) // accumulation
    assert all(len(batches) == steps * accumulation for batches in per_rank)
    return [sorted(i for batches in per_rank for b in batches[k * accumulation:(k + 1) * accumulation] for i in b)
            for k in range(steps)]


@pytest.mark.parametrize("group_by_length", [True, False])
@pytest.mark.parametrize("epoch_no", [0, 3])
def test_global_batches_do_not_depend_on_the_split(group_by_length, epoch_no):
    """Which samples update k trains on depends on the global batch only,
    not on ranks x accumulation (so a run can go on with fewer ranks)."""
    splits = [(1, 1), (1, 4), (2, 2), (4, 1), (2, 4), (8, 1)]
    reference = updates_of(LENGTHS, 32, *splits[0], epoch_no, group_by_length=group_by_length)
    assert len(reference) == -(-len(LENGTHS) // 32)
    for world, accumulation in splits[1:]:
        assert updates_of(LENGTHS, 32, world, accumulation, epoch_no, group_by_length=group_by_length) == reference
    assert updates_of(LENGTHS, 32, 2, 2, epoch_no + 1, group_by_length=group_by_length) != reference


def test_accumulation_keeps_micro_steps_length_grouped_and_resumable():
    sampler = Sampler(LENGTHS, 8, 0, 2, accumulation=3)
    assert len(sampler) == -(-len(LENGTHS) // 48)  # updates per epoch
    sampler.set_epoch(2)
    full = list(sampler)
    assert len(full) == 3 * len(sampler) and all(len(b) == 8 for b in full)
    sampler.set_epoch(2, start=5)  # resume at update 5: micro-batch 15 on
    assert list(sampler) == full[15:]
    spread = np.mean([np.ptp(LENGTHS[b]) for b in full])
    assert spread < 0.1 * np.ptp(LENGTHS)


def test_snake_dealing_gives_each_rank_one_of_every_world_adjacent_samples():
    from workflow.scripts.data.batching import snake_positions

    assert snake_positions(2, 4, 0).tolist() == [0, 3, 4, 7]
    assert snake_positions(2, 4, 1).tolist() == [1, 2, 5, 6]
    assert snake_positions(3, 2, 2).tolist() == [2, 3]
    every = np.sort(np.concatenate([snake_positions(4, 7, r) for r in range(4)]))
    assert every.tolist() == list(range(28))


@pytest.mark.parametrize("world", [2, 4, 8])
def test_ranks_of_an_update_hold_about_the_same_tokens(world):
    """Every update waits for its slowest rank: dealt in snake order the
    ranks' real tokens differ far less than contiguous slices of the
    length-sorted global batch made them (rank 0 always the longest)."""
    lengths = np.random.default_rng(3).integers(8, 67, size=64 * 100)  # SST-2-like spread
    ranks = epoch(lengths, 64 // world, world)
    tokens = np.array([[lengths[b].sum() for b in batches] for batches in ranks])  # [rank, update]
    spread = (tokens.max(0) - tokens.min(0)) / tokens.mean(0)
    sorted_batches = [np.sort(lengths[np.concatenate([r[k] for r in ranks])])[::-1]
                      for k in range(tokens.shape[1])]
    contiguous = np.array([[b[r * (64 // world):(r + 1) * (64 // world)].sum() for r in range(world)]
                           for b in sorted_batches])
    contiguous_spread = (contiguous.max(1) - contiguous.min(1)) / contiguous.mean(1)
    assert np.median(spread) < 0.4 * np.median(contiguous_spread)


def tokens(batch) -> int:
    return int(LENGTHS[batch].sum())


@pytest.mark.parametrize("world, accumulation", [(1, 1), (2, 1), (2, 3)])
def test_a_sampled_epoch_is_its_first_batches_then_one_at_each_quantile_of_tokens(world, accumulation):
    """train.sample_updates: the warm-up's first batches of the epoch, then
    `sample` of the rest spread over their real tokens, in the epoch's
    order: their mean is the epoch's, where its first batches' is not
    bound to be; every rank takes the same updates."""
    full = Sampler(LENGTHS, 4, 0, world, seed=3, accumulation=accumulation)
    sampled = Sampler(LENGTHS, 4, 0, world, seed=3, accumulation=accumulation, sample=10, warmup=3)
    epoch_batches, picked = full.global_batches(), sampled.global_batches()
    assert len(sampled) == len(picked) == 13
    assert all(np.array_equal(a, b) for a, b in zip(picked[:3], epoch_batches[:3]))
    rest = epoch_batches[3:]
    position = [next(i for i, b in enumerate(rest) if np.array_equal(b, p)) for p in picked[3:]]
    assert position == sorted(position)  # the epoch's order
    ranked = sorted(tokens(b) for b in rest)
    assert [tokens(b) for b in sorted(picked[3:], key=tokens)] == \
        [ranked[int((i + 0.5) * len(rest) / 10)] for i in range(10)]
    mean = np.mean([tokens(b) for b in rest])
    assert abs(np.mean([tokens(b) for b in picked[3:]]) - mean) < 0.05 * mean
    ranks = epoch(LENGTHS, 4, world, seed=3, accumulation=accumulation, sample=10, warmup=3)
    assert all(len(batches) == 13 * accumulation for batches in ranks)
    for update, batch in enumerate(picked):  # the ranks' micro-batches make up the global batch
        held = [i for batches in ranks for b in batches[update * accumulation:(update + 1) * accumulation] for i in b]
        assert sorted(held) == sorted(batch.tolist())


def test_a_sample_as_long_as_the_epoch_is_the_epoch():
    whole = Sampler(LENGTHS, 8, 0, 2)
    assert len(Sampler(LENGTHS, 8, 0, 2, sample=len(whole), warmup=3)) == len(whole)
    assert epoch(LENGTHS, 8, 2, sample=len(whole), warmup=3) == epoch(LENGTHS, 8, 2)


def test_the_schema_names_the_warm_up_the_loop_has():
    """train.sample_updates' text says how many of the epoch's first updates are the warm-up:
    the loop's WARMUP_STEPS, whatever that becomes."""
    from pathlib import Path

    import yaml

    from workflow.scripts.train.loop import WARMUP_STEPS

    repo = Path(__file__).resolve().parents[2]
    schema = yaml.safe_load((repo / "workflow/schemas/config.schema.yaml").read_text())
    text = schema["properties"]["train"]["properties"]["sample_updates"]["description"]
    assert f"the first {WARMUP_STEPS} (a step's warm-up)" in " ".join(text.split())
