"""Demo SQuAD: company profiles and questions in the official SQuAD JSON format.

Each paragraph states a few facts of one made-up company; questions ask for
one fact each, with the answer span in the text. In v2 about a third of the
questions are unanswerable: they ask for a fact the text omits, or ask about
another company.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

from workflow.scripts.data.demo_text import CITIES, EXCHANGES, PRODUCTS, VOCABULARY, company, fields, fill, person

# Profile facts of a company; {ref}/{refs} become the name or "It"/"Its" etc.
PROFILE = VOCABULARY["squad_profile"]
# The profile fact that states each answer slot.
SLOT_FACT = VOCABULARY["squad_slot_fact"]
# (answer slot, question template) pairs.
QUESTIONS = VOCABULARY["squad_questions"]


def _profile(name: str, rng: random.Random) -> dict:
    """Every fact of one company, as text ready to be put into templates."""
    year = rng.randrange(1890, 2015)
    return {"company": name, "city": rng.choice(CITIES), "year": str(year), "founder": person(rng),
            "hq": rng.choice(CITIES), "employees": f"{rng.randrange(2, 900) * 50:,}", "ceo": person(rng),
            "ceo_year": str(rng.randrange(max(year, 1990), 2020)), "product": rng.choice(PRODUCTS),
            "deal_year": str(rng.randrange(max(year, 1980), 2021)), "target": company(rng),
            "amount": f"${rng.randrange(5, 990)} million", "rev_year": str(rng.randrange(max(year, 2005), 2021)),
            "revenue": f"${round(rng.uniform(0.2, 40), 1)} billion", "exchange": rng.choice(EXCHANGES),
            "ticker": "".join(rng.choice(string.ascii_uppercase) for _ in range(rng.randrange(3, 5)))}


def _context(profile: dict, facts: list[str], rng: random.Random) -> tuple[str, dict]:
    """Join one sentence per fact; returns the context and {slot: (start, end)}."""
    text, spans = "", {}
    for i, fact in enumerate(facts):
        name = profile["company"]
        ref = name if i == 0 else rng.choice(["It", "The company", name])
        owner = name + ("'" if name.endswith("s") else "'s")
        refs = owner if i == 0 else rng.choice(["Its", "The company's", owner])
        values = {**profile, "ref": ref, "refs": refs, "ref2": name if i == 0 else "the company",
                  "refs2": owner if i == 0 else "its"}
        sentence, local = fill(rng.choice(PROFILE[fact]), values, rng)
        text += " " if text else ""
        spans.update({k: (a + len(text), b + len(text)) for k, (a, b) in local.items() if k in SLOT_FACT})
        text += sentence
    return text, spans


def _answers(context: str, slot: str, span: tuple, dev: bool) -> list[dict]:
    """The gold span, plus on dev up to two alternatives ("in 1998", "1,200 people", a surname)."""
    start, end = span
    spans = [(start, end)]
    if dev:
        if context[max(0, start - 3):start] == "in ":
            spans.append((start - 3, end))
        for suffix in (" people", " employees"):
            if context.startswith(suffix, end):
                spans.append((start, end + len(suffix)))
        if slot in ("founder", "ceo"):
            spans.append((context.index(" ", start) + 1, end))
    return [{"text": context[a:b], "answer_start": a} for a, b in spans[:3]]


def _qid(rng: random.Random) -> str:
    """A question id shaped like SQuAD's (24 hex digits)."""
    return f"{rng.getrandbits(96):024x}"


def _paragraph(name: str, flags: list[bool], rng: random.Random, dev: bool, other: str | None) -> dict:
    """One paragraph with len(flags) questions; True flags are unanswerable.

    ``other`` (v2 only, else None) is a company absent from the text: an unanswerable
    question either asks about a fact the text omits or asks about ``other``."""
    profile = _profile(name, rng)
    facts = [f for f in PROFILE if f in rng.sample(sorted(PROFILE), rng.randrange(3, 6))]
    text, spans = _context(profile, facts, rng)
    fits = [(s, q) for s, q in QUESTIONS if s in spans and all(f in spans or f == "company" for f in fields(q))]
    missing = [(s, q) for s, q in QUESTIONS if SLOT_FACT[s] not in facts]
    qas, asked = [], set()
    for impossible in flags:
        pool = [(s, q) for s, q in (missing if impossible and rng.random() < 0.6 else fits) if s not in asked]
        if not pool:
            continue
        slot, q = rng.choice(pool)
        asked.add(slot)
        swap = impossible and SLOT_FACT[slot] in facts  # same question about a company not in the text
        question = fill(q, {**profile, "company": other} if swap else profile, rng)[0]
        qa = {"id": _qid(rng), "question": question}
        if impossible:
            qa.update(answers=[], is_impossible=True)
            if swap:
                qa["plausible_answers"] = _answers(text, slot, spans[slot], dev=False)
        else:
            qa["answers"] = _answers(text, slot, spans[slot], dev)
            if other:
                qa["is_impossible"] = False
        qas.append(qa)
    return {"context": text, "qas": qas}


def _squad_split(n: int, rng: random.Random, used: set, dev: bool, v2: bool) -> list[dict]:
    """Articles holding n questions; ``used`` keeps company names unique across splits."""
    flags = [i < round(n / 3) for i in range(n)] if v2 else [False] * n
    rng.shuffle(flags)
    data, done = [], 0
    while done < n:
        name = company(rng)
        if name in used:
            continue
        used.add(name)
        other = company(rng) if v2 else None
        k = min(rng.randrange(3, 6), n - done)
        para = _paragraph(name, flags[done:done + k], rng, dev, other)
        if len(para["qas"]) < k or (other and other in para["context"]):  # retry with another paragraph
            continue
        done += k
        data.append({"title": name.replace(" ", "_"), "paragraphs": [para]})
    return data


def write_squad_demo(out_dir, n_train: int = 1200, n_dev: int = 300, seed: int = 0,
                     version_2: bool = False) -> list[Path]:
    """Write train/dev files in the official SQuAD v1.1 (or v2.0) JSON format; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    version, suffix = ("v2.0", "v2.0") if version_2 else ("1.1", "v1.1")  # as in the official files
    rng, used = random.Random(f"squad-{suffix}-{seed}"), set()
    paths = []
    for split, n in (("train", n_train), ("dev", n_dev)):
        data = _squad_split(n, rng, used, split == "dev", version_2)
        paths.append(out / f"{split}-{suffix}.json")
        paths[-1].write_text(json.dumps({"version": version, "data": data}, ensure_ascii=False) + "\n",
                             encoding="utf-8", newline="\n")
    return paths
