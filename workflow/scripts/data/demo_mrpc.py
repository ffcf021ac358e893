"""Demo MRPC: sentence pairs in the original GLUE MRPC TSV format.

A pair renders one fact through two templates of a frame (label 1 =
paraphrase, ~2/3 positive); most negatives change one or two facts both
sentences mention, so they look like the near misses of the real corpus.
"""

from __future__ import annotations

import random
from pathlib import Path

from workflow.scripts.data.demo_text import CITIES, LEX, SUFFIXES, VOCAB, VOCABULARY, company, fields, fill, person

# Frames: slot types, templates that say the same fact, optional polarity
# ("pol") and roles that can be swapped ("swap").
FRAMES = VOCABULARY["mrpc_frames"]

# Extra detail added to one sentence of some pairs (either label), as in real MRPC.
EXTRAS = VOCABULARY["mrpc_extras"]

# --------------------------------------------------------------------------- slot values


def _sample(kind: str, rng: random.Random):
    """A raw value for a slot type (numbers stay numeric so they can be perturbed)."""
    if kind == "company":
        return company(rng)
    if kind == "person":
        return person(rng)
    if kind in VOCAB:
        return rng.choice(VOCAB[kind])
    return {"money": lambda: rng.choice([rng.randrange(5, 990), round(rng.uniform(1.1, 9.9), 1)]),
            "count": lambda: rng.randrange(2, 60) * 50, "small": lambda: rng.randrange(3, 40),
            "percent": lambda: rng.randrange(2, 75), "rate": lambda: round(rng.uniform(2.5, 11.9), 1),
            "price": lambda: round(rng.uniform(3, 150), 2), "year": lambda: rng.randrange(1988, 2012)}[kind]()


def _forms(kind: str, value) -> list[str]:
    """Interchangeable surface forms of a value (paraphrases may differ in them)."""
    if kind == "money":
        unit = "billion" if isinstance(value, float) else "million"
        return [f"${value} {unit}", f"{value} {unit} dollars"]
    if kind == "count":
        return [f"{value:,}"]
    if kind in ("percent", "rate"):
        return [f"{value} percent", f"{value}%"]
    if kind == "price":
        return [f"${value:.2f}"]
    if kind == "company" and value.split()[-1] in SUFFIXES:
        return [value, value, value.split()[0]]  # "Apex Systems" is also just "Apex"
    return [str(value)]


def _perturb(kind: str, value, rng: random.Random):
    """A different value of the same kind, numerically close for numbers."""
    while True:
        if kind in ("money", "count", "rate", "price"):
            new = type(value)(value * rng.choice([0.5, 0.75, 1.25, 1.5, 2, 3]))
            new = round(new, 2 if kind == "price" else 1) if isinstance(new, float) else new
            new = new - new % 50 if kind == "count" else new
        elif kind in ("year", "small", "percent"):
            new = value + rng.choice([-10, -5, -3, -2, -1, 1, 2, 3, 5, 10])
        else:
            new = _sample(kind, rng)
        if kind == "company" and new.split()[0] == value.split()[0]:
            continue
        if new != value and (isinstance(new, str) or new > 1) and _forms(kind, new) != _forms(kind, value):
            return new


# --------------------------------------------------------------------------- rendering


def _say(frame: dict, fact: dict, template: str, rng: random.Random) -> str:
    """Render a fact; "{x_a}" is the attributive form of x ("a $5 million deal")."""
    values = {k: _forms(frame["slots"][k], v) for k, v in fact.items() if k in frame["slots"]}
    values.update({f"{k}_a": forms[:1] for k, forms in values.items()})
    return fill(template, {**values, "pol": fact.get("pol")}, rng)[0]


# --------------------------------------------------------------------------- pairs


def _new_fact(frame: dict, rng: random.Random) -> dict:
    """Values for every slot of a frame (all distinct), and a polarity if it has one."""
    fact = {}
    while len(set(map(str, fact.values()))) < len(frame["slots"]):  # all values distinct
        fact = {name: _sample(kind, rng) for name, kind in frame["slots"].items()}
    if "pol" in frame:
        fact["pol"] = rng.choice(frame["pol"])
    return fact


def _mutate(frame: dict, fact: dict, shared: set, rng: random.Random) -> dict:
    """Change one or two facts that both sentences mention (or swap two roles)."""
    kinds = frame["slots"]
    new = dict(fact)
    if "swap" in frame and set(frame["swap"]) <= shared and rng.random() < 0.3:
        a, b = frame["swap"]  # asymmetric roles: buyer/target, new/old executive
        new[a], new[b] = fact[b], fact[a]
        return new
    for name in rng.sample(sorted(shared), min(len(shared), 1 if rng.random() < 0.6 else 2)):
        if name == "pol":
            new["pol"] = next(p for p in frame["pol"] if p != fact["pol"])
        else:
            new[name] = _perturb(kinds[name], fact[name], rng)
    return new


def _elaborate(pair: tuple[str, str], rng: random.Random) -> tuple[str, str]:
    """Sometimes append an attribution clause (with new names) to one sentence of a pair."""
    i = rng.randrange(2)
    if rng.random() < 0.2 and not any(w in pair[i] for w in (" said", " reported", " announced", "ccording")):
        values = {"city": rng.choice(CITIES), "person": person(rng), "company": company(rng)}
        clause = fill(rng.choice(EXTRAS), values, rng)[0]
        pair = (pair[0][:-1] + clause + ".", pair[1]) if i == 0 else (pair[0], pair[1][:-1] + clause + ".")
    return pair


def _mrpc_pair(label: int, rng: random.Random) -> tuple[str, str]:
    """A paraphrase (label 1) or a near-miss / unrelated pair (label 0)."""
    return _elaborate(_mrpc_sentences(label, rng), rng)


def _mrpc_sentences(label: int, rng: random.Random) -> tuple[str, str]:
    """Two renderings of one fact; for label 0 the second one changes the fact or tells another."""
    frame = rng.choice(FRAMES)
    t1, t2 = rng.sample(frame["templates"], 2)
    fact = _new_fact(frame, rng)
    if label == 1:
        return _say(frame, fact, t1, rng), _say(frame, fact, t2, rng)
    if rng.random() < 0.25:  # unrelated pair: other facts, often another frame
        other = rng.choice(FRAMES)
        return _say(frame, fact, t1, rng), _say(other, _new_fact(other, rng), rng.choice(other["templates"]), rng)
    shared = {f.removesuffix("_a") for f in fields(t1)} & {f.removesuffix("_a") for f in fields(t2)}
    shared &= set(frame["slots"])
    polar = any(isinstance(LEX.get(f), dict) for f in fields(t1)) and any(
        isinstance(LEX.get(f), dict) for f in fields(t2))
    shared |= {"pol"} if polar else set()
    return _say(frame, fact, t1, rng), _say(frame, _mutate(frame, fact, shared, rng), t2, rng)


def _mrpc_rows(n: int, rng: random.Random, seen: set, ids: set) -> list[str]:
    """n TSV rows with unique sentences (across splits, through ``seen``) and unique ids."""
    labels = [1] * round(n * 0.675) + [0] * (n - round(n * 0.675))
    rng.shuffle(labels)
    rows = []
    for label in labels:
        s1, s2 = _mrpc_pair(label, rng)
        while s1 in seen or s2 in seen or s1 == s2:
            s1, s2 = _mrpc_pair(label, rng)
        seen.update((s1, s2))
        id1, id2 = (_new_id(rng, ids) for _ in range(2))
        rows.append(f"{label}\t{id1}\t{id2}\t{s1}\t{s2}\n")
    return rows


def _new_id(rng: random.Random, used: set) -> int:
    """A sentence id in MRPC's range, not used before."""
    while (i := rng.randrange(100000, 4000000)) in used:
        pass
    used.add(i)
    return i


def write_mrpc_demo(out_dir, n_train: int = 1600, n_dev: int = 400, seed: int = 0) -> list[Path]:
    """Write DIR/train.tsv and DIR/dev.tsv in the GLUE MRPC format; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng, seen, ids = random.Random(f"mrpc-{seed}"), set(), set()
    paths = []
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        rows = _mrpc_rows(n, rng, seen, ids)
        header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        paths.append(out / name)
        paths[-1].write_text(header + "".join(rows), encoding="utf-8", newline="\n")
    return paths
