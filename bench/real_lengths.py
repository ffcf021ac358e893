"""Generated data with the token lengths of real GLUE data, for the benches.

bench/glue-lengths.json (a copy of ../shared/data/glue-lengths.json, so a
checkout benches alone) holds per task the token counts of the real
training examples under MiniLM's tokenizer (BERT uncased WordPiece;
one sentence or a pair, [CLS]/[SEP] included, truncated at 128): a
histogram of 8-token bins and the p10, p50 and p90. `draw` gives lengths
that follow it: a bin by its count, then uniform within it, the bins cut
where a quantile of the file falls inside one (so p10/p50/p90 hold too),
from the shortest possible example (3 tokens, a pair 5) to the task's max.

`shape` turns demo examples (workflow/scripts/data/demo_mrpc.py's pairs or
their sentences) into text of exactly a drawn length under a tokenizer
(exact for WordPiece, where a text's tokens are its words' tokens): per
target, the unused example whose length fits it best (the longest that is
not longer, else the shortest, cut), its own words first, then words of
other sentences of the same split until the count is hit. A pair's two
sides share the target in proportion to their own lengths, a longer target
going to the shorter side first; labels stay the example's own.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

LENGTHS = Path(__file__).with_name("glue-lengths.json")
FILE_KEYS = {"mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE", "sst2": "SST-2", "cola": "CoLA"}
PAIRED = ("mrpc", "stsb", "rte")


def table(task: str) -> dict:
    """The file's entry of `task` (mrpc, stsb, rte, sst2, cola, or the file's own key, MRPC ...)."""
    return json.loads(LENGTHS.read_text())[FILE_KEYS.get(task, task)]


def _knots(task: str, shortest: int) -> tuple[np.ndarray, np.ndarray]:
    """The piecewise-linear CDF: (length, share of examples shorter) at each
    bin edge and at each quantile of the file (at v + 1/2: p50 = v says half
    are at most v)."""
    entry = table(task)
    counts = {int(start): n for start, n in entry["histogram_bin8"].items()}
    total, below, knots = sum(counts.values()), 0.0, {}
    for start in sorted(counts):
        low, high = max(start, shortest), min(start + 8, entry["max"] + 1)
        knots.setdefault(low, below)
        below += counts[start] / total
        knots[high] = below
    for share, key in ((0.1, "p10"), (0.5, "p50"), (0.9, "p90")):
        at = entry[key] + 0.5
        if min(knots) < at < max(knots) and at not in knots:
            knots[at] = share
    lengths = np.array(sorted(knots))
    return lengths, np.maximum.accumulate(np.array([knots[x] for x in lengths]))


def draw(task: str, count: int, seed: int = 0) -> np.ndarray:
    """`count` token lengths (specials included) with the task's distribution."""
    paired = FILE_KEYS.get(task, task).lower().replace("-", "") in PAIRED
    lengths, shares = _knots(task, 5 if paired else 3)
    u = np.random.default_rng(seed).random(count)
    return np.floor(np.interp(u, shares, lengths)).astype(int)


class _Counter:
    """Tokens per whitespace-separated word under `tokenizer` (cached, batched)."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.cache = tokenizer, {}
        self.add([w for text in texts for w in text.split()])

    def add(self, words) -> None:
        new = sorted(set(words) - set(self.cache))
        if new:
            ids = self.tokenizer(new, add_special_tokens=False)["input_ids"]
            self.cache.update((w, len(i)) for w, i in zip(new, ids))

    def __call__(self, text: str) -> int:
        return sum(self.cache[w] for w in text.split())


class _Filler:
    """Words of the split's sentences in a seeded order, endlessly."""

    def __init__(self, sentences: Sequence[str], rng: np.random.Generator):
        self.sentences, self.rng, self.words = list(sentences), rng, []

    def fill(self, words: list[str], room: int, count: _Counter) -> list[str]:
        """`words` and further words, each that fits, until `room` tokens are used."""
        taken = []
        for word in words:
            if 0 < count.cache[word] <= room:
                taken.append(word)
                room -= count.cache[word]
        tries = 0
        while room > 0 and tries < 10_000:
            if not self.words:
                self.words = self.sentences[self.rng.integers(len(self.sentences))].split()
            word = self.words.pop(0)
            tries += 1
            if 0 < count.cache[word] <= room:
                taken.append(word)
                room -= count.cache[word]
        return taken


def _split(total: int, own: list[int]) -> list[int]:
    """`total` tokens over the sides of lengths `own`: cut in proportion when
    shorter; when longer, the extra first to the shorter side."""
    if len(own) == 1:
        return [total]
    a, b = own
    if a + b >= total:
        first = min(max(1, round(total * a / max(a + b, 1))), total - 1)
    else:
        first = min(max(a, total // 2), total - b)
    return [first, total - first]


def shape(task: str, examples: Sequence[tuple], tokenizer, count: int, seed: int = 0) -> dict[str, list]:
    """`count` examples with the task's real lengths under `tokenizer`.

    examples: (label, sentence) or (label, sentence1, sentence2) of one split,
    more than `count` for a close fit; returns the columns `sentence` (or
    `sentence1`, `sentence2`), `label` and `target` (the drawn length)."""
    paired = task in PAIRED
    rng = np.random.default_rng(seed)
    texts = [t for e in examples for t in e[1:]]
    counter = _Counter(tokenizer, texts)
    specials = tokenizer.num_special_tokens_to_add(pair=paired)
    targets = draw(task, count, seed)
    lengths = [sum(counter(t) for t in e[1:]) for e in examples]
    free = sorted(range(len(examples)), key=lambda i: lengths[i])  # unused examples, shortest first
    free_lengths = [lengths[i] for i in free]
    filler = _Filler(texts, rng)
    columns = {"label": [], "target": []} | ({"sentence1": [], "sentence2": []} if paired else {"sentence": []})
    for target in targets:
        if not free:
            raise ValueError(f"shape: {len(examples)} examples for {count} targets; give more examples")
        room = int(target) - specials
        at = max(bisect.bisect_right(free_lengths, room) - 1, 0)  # the longest that fits, else the shortest
        example = examples[free.pop(at)]
        free_lengths.pop(at)
        own = [counter(t) for t in example[1:]]
        sides = [" ".join(filler.fill(t.split(), r, counter)) for t, r in zip(example[1:], _split(room, own))]
        for key, text in zip([k for k in columns if k.startswith("sentence")], sides):
            columns[key].append(text)
        columns["label"].append(example[0])
        columns["target"].append(int(target))
    return columns


def token_lengths(columns: dict[str, list], tokenizer, max_length: int = 128) -> np.ndarray:
    """The token counts of `shape`'s columns as the bench tokenizes them."""
    texts = [columns["sentence1"], columns["sentence2"]] if "sentence1" in columns else [columns["sentence"]]
    return np.array([len(ids) for ids in tokenizer(*texts, truncation=True, max_length=max_length)["input_ids"]])
