"""Vocabulary and template rendering shared by the demo generators.

The words live in ``demo_vocabulary.json`` (data, not code) and are read once
at import; ``demo_mrpc`` and ``demo_squad`` draw everything from it through
their own seeded ``random.Random``, so the files stay byte-identical.

Keys: ``first_names``/``last_names`` (people), ``company_stems``/``company_suffixes``
(companies), ``slot_values`` (one word list per slot type), ``synonyms`` (words
a template may vary), ``mrpc_frames``/``mrpc_extras`` (MRPC sentence frames and
attribution clauses), ``squad_profile``/``squad_slot_fact``/``squad_questions``
(SQuAD company profiles and the questions about them).
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

VOCABULARY = json.loads(Path(__file__).with_name("demo_vocabulary.json").read_text(encoding="utf-8"))

FIRST = VOCABULARY["first_names"]
LAST = VOCABULARY["last_names"]
STEMS = VOCABULARY["company_stems"]
SUFFIXES = VOCABULARY["company_suffixes"]
VOCAB = VOCABULARY["slot_values"]
"""Slot type -> the words a slot of that type is filled with (companies and people are built)."""
CITIES, PRODUCTS, EXCHANGES = VOCAB["city"], VOCAB["product"], VOCAB["exchange"]

# Synonyms; a dict entry is chosen by the fact's polarity ("pol").
LEX = VOCABULARY["synonyms"]


def company(rng: random.Random) -> str:
    """A company name: a stem and a suffix ("Apex Systems"), sometimes two stems."""
    first, second = rng.sample(STEMS, 2)
    return f"{first} {rng.choice(SUFFIXES)}" if rng.random() < 0.8 else f"{first} {second}"


def person(rng: random.Random) -> str:
    """A first and a last name."""
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def fields(template: str) -> list[str]:
    """The slot names of a template, in order."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def fill(template: str, values: dict, rng: random.Random) -> tuple[str, dict]:
    """Render a template; returns the text and {slot: (start, end)} of the filled slots."""
    out, spans, pos = [], {}, 0
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(literal)
        pos += len(literal)
        if field is None:
            continue
        if field in values:
            word = values[field] if isinstance(values[field], str) else rng.choice(values[field])
            spans[field] = (pos, pos + len(word))
        else:
            entry = LEX[field]
            word = rng.choice(entry[values["pol"]] if isinstance(entry, dict) else entry)
        out.append(word)
        pos += len(word)
    text = "".join(out)
    return text[0].upper() + text[1:], spans
