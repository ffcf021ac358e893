"""A 4-class news demo in the shape of AG News (own-data task classification):
``train.csv`` and ``dev.csv`` with columns ``label`` (1-4) and ``text``, like
the files a user brings. Classes: 1 business, 2 crime, 3 disasters,
4 politics; sentences share names, cities and weekdays, so only the
topic words tell the class. Seeded: the same arguments give the same bytes."""

from __future__ import annotations

import csv
import random
from pathlib import Path

from workflow.scripts.data.demo_text import CITIES, EXCHANGES, PRODUCTS, VOCAB, company, person

TEMPLATES = {
    1: ["{company} shares rose on the {exchange} after it unveiled a {product} on {weekday}.",
        "{person} said the {product} would lift {company}'s {quarter}-quarter sales."],
    2: ["{person} was charged with {crime} in {city} on {weekday}, {agency} said.",
        "{agency} opened an inquiry into {crime} at a firm run by {person}."],
    3: ["A {event} in {city} on {weekday} forced hundreds of families from their homes.",
        "Crews in {city} were still clearing damage from the {event}, {person} said."],
    4: ["Lawmakers argued over {topic} on {weekday} as the {office} released new figures.",
        "{person} told reporters in {city} that a deal on {topic} was close."],
}


def sentence(rng: random.Random, label: int) -> str:
    return rng.choice(TEMPLATES[label]).format(
        company=company(rng), exchange=rng.choice(EXCHANGES), product=rng.choice(PRODUCTS), city=rng.choice(CITIES),
        weekday=rng.choice(VOCAB["weekday"]), quarter=rng.choice(VOCAB["quarter"]), person=person(rng),
        crime=rng.choice(VOCAB["crime"]), agency=rng.choice(VOCAB["agency"]), event=rng.choice(VOCAB["event"]),
        topic=rng.choice(VOCAB["topic"]), office=rng.choice(VOCAB["office"]))


def write_news_demo(out, n_train: int = 1600, n_dev: int = 400, seed: int = 0) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, count, offset in (("train.csv", n_train, 0), ("dev.csv", n_dev, 1)):
        rng = random.Random(f"news-{seed}-{offset}")
        with open(out / name, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["label", "text"])
            for i in range(count):
                label = i % 4 + 1
                writer.writerow([label, sentence(rng, label)])
        paths.append(out / name)
    return paths
