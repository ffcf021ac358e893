"""The data of bench.accuracy_seeds, tokenized with the model's tokenizer:
MRPC-shaped pairs (train_bench.prepare: the demo's pairs fitted to real
MRPC's token lengths, bench/real_lengths.py) and STS-B-shaped ones.

The project's demo generators have no STS-B; the STS-B-shaped pairs come
from the MRPC demo's own pair construction (workflow/scripts/data/
demo_mrpc.py), scored by what the construction changed, so the target is
learnable from the text:

- 5.0  one fact rendered through two templates of its frame (a paraphrase)
- 3.0  the same fact with one value both sentences mention changed
- 2.0  two values changed, or two roles swapped (buyer and target, ...)
- 1.0  the same frame, another fact (every value new)
- 0.0  another frame
- -0.8 where one sentence gets an attribution clause the other lacks

plus a uniform jitter of +-0.25 (annotators disagree), clipped to 0-5.
The shares follow STS-B's spread of scores roughly (a third near 5).
The STS-B-shaped pairs keep the demo's own lengths (mean 41 tokens a
pair, p10 33, p90 50), not real STS-B's (mean 28, median 23): the demo's
shortest pair has 29 tokens, so fitting them to STS-B's lengths would cut
away the facts the score is about. The MRPC-shaped pairs reach MRPC's
lengths mostly by taking words of other sentences, so their labels hold.
"""

from __future__ import annotations

import random
from pathlib import Path

import datasets

from bench.train_bench import prepare as prepare_mrpc
from workflow.scripts.common.modeling import load_tokenizer
from workflow.scripts.data import demo_mrpc as mrpc
from workflow.scripts.data.demo_text import LEX, fields

KINDS = (("paraphrase", 0.35), ("changed", 0.40), ("same_frame", 0.10), ("other_frame", 0.15))
SCORE_BY_CHANGES = {0: 5.0, 1: 3.0, 2: 2.0}


def _shared(frame: dict, t1: str, t2: str) -> set:
    """The slots (and polarity) both templates mention, as demo_mrpc finds them."""
    shared = {f.removesuffix("_a") for f in fields(t1)} & {f.removesuffix("_a") for f in fields(t2)}
    shared &= set(frame["slots"])
    polar = all(any(isinstance(LEX.get(f), dict) for f in fields(t)) for t in (t1, t2))
    return shared | ({"pol"} if polar else set())


def stsb_pair(rng: random.Random) -> tuple[str, str, float]:
    """Two sentences and their similarity, 0-5."""
    kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    frame = rng.choice(mrpc.FRAMES)
    t1, t2 = rng.sample(frame["templates"], 2)
    fact = mrpc._new_fact(frame, rng)
    if kind == "other_frame":
        other = rng.choice([f for f in mrpc.FRAMES if f is not frame])
        second, t2, frame2, score = mrpc._new_fact(other, rng), rng.choice(other["templates"]), other, 0.0
    elif kind == "same_frame":
        second, frame2, score = mrpc._new_fact(frame, rng), frame, 1.0
    else:
        second = mrpc._mutate(frame, fact, _shared(frame, t1, t2), rng) if kind == "changed" else fact
        frame2, score = frame, SCORE_BY_CHANGES[min(2, sum(second[k] != fact[k] for k in fact))]
    pair = (mrpc._say(frame, fact, t1, rng), mrpc._say(frame2, second, t2, rng))
    elaborated = mrpc._elaborate(pair, rng)
    score -= 0.8 if elaborated != pair and score > 0 else 0.0
    return *elaborated, round(min(5.0, max(0.0, score + rng.uniform(-0.25, 0.25))), 3)


def stsb_raw(n_train: int, n_dev: int, seed: int = 0) -> datasets.DatasetDict:
    """Train and dev pairs with no sentence shared within or across splits."""
    rng, seen, splits = random.Random(f"stsb-{seed}"), set(), {}
    for name, n in (("train", n_train), ("validation", n_dev)):
        rows = []
        while len(rows) < n:
            s1, s2, score = stsb_pair(rng)
            if s1 not in seen and s2 not in seen and s1 != s2:
                seen.update((s1, s2))
                rows.append((s1, s2, score))
        splits[name] = datasets.Dataset.from_dict(dict(zip(("sentence1", "sentence2", "label"), zip(*rows))))
    return datasets.DatasetDict(splits)


def prepare(work: Path, model: str, task: str, n_train: int, n_dev: int) -> Path:
    """The tokenized DatasetDict (train, validation) of one task shape."""
    if task == "mrpc":
        return prepare_mrpc(work / "mrpc", model, n_train, n_dev)
    tokenizer = load_tokenizer(model)
    tokenized = stsb_raw(n_train, n_dev).map(
        lambda b: {**tokenizer(b["sentence1"], b["sentence2"], truncation=True, max_length=128),
                   "labels": [float(x) for x in b["label"]]},
        batched=True, remove_columns=["sentence1", "sentence2", "label"])
    out = work / "stsb" / "tokenized"
    tokenized.save_to_disk(str(out))
    return out
