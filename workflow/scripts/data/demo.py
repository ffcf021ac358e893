"""Deterministic demo datasets in the original GLUE MRPC and SQuAD file formats.

Everything is generated from ``random.Random`` instances seeded from the
arguments (never the global RNG), so the same arguments give byte-identical
files.  Usage::

    python -m workflow.scripts.data.demo --task mrpc --out DIR [--train N] [--dev N] [--seed S]
    python -m workflow.scripts.data.demo --task squad|squad_v2 --out DIR ...

MRPC: ``DIR/train.tsv`` and ``DIR/dev.tsv`` (label 1 = paraphrase, ~2/3 positive).
SQuAD: ``DIR/train-v1.1.json`` / ``DIR/dev-v1.1.json`` (v2: ``*-v2.0.json`` with
about a third of the questions unanswerable).
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path

# --------------------------------------------------------------------------- vocabulary

FIRST = """James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William
Barbara Richard Susan Joseph Jessica Thomas Sarah Charles Karen Daniel Nancy Matthew Lisa
Anthony Betty Mark Helen Donald Sandra Steven Donna Paul Carol Andrew Ruth Joshua Sharon
Kenneth Michelle Kevin Laura Brian Emily George Kimberly Timothy Deborah Ronald Angela
Edward Melissa Jason Stephanie Jeffrey Rebecca Ryan Maria Jacob Anna Gary Ingrid Nicholas
Olga Eric Priya Jonathan Yuki Larry Fatima Justin Chen Scott Amara Brandon Lucia Frank
Sofia Raymond Elena Gregory Hannah Samuel Greta Patrick Nadia Alexander Ahmed Dennis
Carmen Tyler Rosa Aaron Irene Henry Marta Walter Noura Peter Keiko Harold Leila""".split()

LAST = """Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez
Lopez Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White
Harris Sanchez Clark Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres
Nguyen Hill Flores Green Adams Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts
Gomez Phillips Evans Turner Diaz Parker Cruz Edwards Collins Reyes Stewart Morris Morales
Murphy Cook Rogers Gutierrez Ortiz Morgan Cooper Peterson Bailey Reed Kelly Howard Ramos
Kim Cox Ward Richardson Watson Brooks Chavez Wood James Bennett Gray Mendoza Ruiz Hughes
Price Alvarez Castillo Sanders Patel Myers Long Ross Foster Jimenez Powell Jenkins Perry
Russell Sullivan Bell Coleman Butler Henderson Barnes Fischer Novak Haas Lindqvist Okafor
Tanaka Schultz Moreau Kowalski Rossi Jansen Dubois Larsen Petrov Sato Weber Brennan""".split()

CITIES = """Boston|Chicago|Denver|Seattle|Atlanta|Houston|Dallas|Phoenix|Portland|Detroit|
Miami|Austin|Nashville|Memphis|Baltimore|Cleveland|Pittsburgh|Cincinnati|Milwaukee|Omaha|
Tulsa|Albuquerque|Sacramento|Fresno|San Diego|San Jose|Los Angeles|San Francisco|New York|
Philadelphia|Minneapolis|St. Louis|Kansas City|Indianapolis|Columbus|Charlotte|Raleigh|
Richmond|Buffalo|Rochester|Hartford|Providence|Newark|Tampa|Orlando|Jacksonville|
New Orleans|Salt Lake City|Las Vegas|Boise|Spokane|Anchorage|Honolulu|Toronto|Montreal|
Vancouver|Ottawa|Calgary|London|Paris|Berlin|Madrid|Rome|Milan|Munich|Frankfurt|Hamburg|
Vienna|Zurich|Geneva|Brussels|Amsterdam|Rotterdam|Dublin|Edinburgh|Glasgow|Manchester|
Stockholm|Oslo|Copenhagen|Helsinki|Warsaw|Prague|Budapest|Lisbon|Athens|Istanbul|Cairo|
Lagos|Nairobi|Johannesburg|Mumbai|Delhi|Bangalore|Singapore|Jakarta|Manila|Bangkok|
Seoul|Tokyo|Osaka|Beijing|Shanghai|Sydney|Melbourne|Auckland|Santiago|Lima|Bogota|
Mexico City|Sao Paulo|Buenos Aires""".replace("\n", "").split("|")

STEMS = """Apex Northwind Crestline Halvorsen Meridian Bluewater Ironbridge Summit Pinnacle
Redwood Silverline Granite Harborview Keystone Lakeshore Oakridge Sterling Trident Vantage
Westfield Evergreen Falcon Horizon Juniper Kingsley Lighthouse Mariner Norstar Orion
Pacifica Quantum Riverton Sequoia Tidewater Unity Vertex Whitmore Zenith Aldridge Beacon
Cobalt Delmar Eastgate Fairview Gateway Highland Ironwood Jasper Kestrel Lexington Monarch
Newbury Oxbow Prairie Quarry Ridgeline Stonegate Thornton Upland Valiant Windham Yardley
Ashford Brightwater Cedarbrook Driftwood Emberly Foxhall Glenmore Hawthorne Inverness
Larkspur Millbrook Northgate Overland Pembroke Rockport Shoreline Tamarack Wexford
Amberline Boreal Caldera Dunmore Everett Fenwick Galloway Hollister Ivory Kendrick
Langford Marlow Norcross Osprey Prescott Radnor Saxton Tolland Vireo Winslow Acorn
Bramble Corvid Dovetail Elmstead Farrow Gilford Hartwell Ingram Lockwood""".split()

SUFFIXES = """Systems Holdings Group Industries Energy Networks Pharmaceuticals Bancorp Motors
Airlines Foods Technologies Media Partners Labs Software Insurance Chemicals""".split()

TITLES = ["chief executive", "chief financial officer", "president", "chairman",
          "chief operating officer", "general counsel", "head of research", "chief technology officer"]
AGENCIES = ["the Securities and Exchange Commission", "the Justice Department",
            "the Federal Trade Commission", "state regulators", "a group of shareholders",
            "the Environmental Protection Agency", "former employees", "the state attorney general"]
PRODUCTS = ["new smartphone", "wireless router", "cholesterol drug", "hybrid sedan", "accounting software",
            "flu vaccine", "tablet computer", "video game console", "electric scooter", "home security camera",
            "diabetes test kit", "cloud storage service", "frozen pizza line", "budget airline route",
            "solar panel", "pickup truck", "streaming service", "hearing aid", "laptop", "sports drink"]
EVENTS = ["storm", "fire", "tornado", "flood", "gas explosion", "powerful earthquake", "blizzard", "mudslide"]
CRIMES = ["fraud", "money laundering", "insider trading", "tax evasion", "bribery", "embezzlement",
          "perjury", "securities fraud", "extortion", "wire fraud"]
TOPICS = ["trade", "the budget", "energy prices", "border security", "the proposed merger", "climate policy",
          "water rights", "farm subsidies", "the pension plan", "airport expansion", "public transit", "tax reform"]
OFFICES = ["Labor Department", "Bureau of Labor Statistics", "state employment office", "Commerce Department"]
EXCHANGES = ["New York Stock Exchange", "Nasdaq", "London Stock Exchange", "Toronto Stock Exchange"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
QUARTERS = ["first", "second", "third", "fourth"]

VOCAB = {"company": None, "person": None, "city": CITIES, "title": TITLES, "agency": AGENCIES,
         "product": PRODUCTS, "event": EVENTS, "crime": CRIMES, "topic": TOPICS, "office": OFFICES,
         "exchange": EXCHANGES, "weekday": WEEKDAYS, "month": MONTHS, "quarter": QUARTERS}

# Synonyms; a dict entry is chosen by the fact's polarity ("pol").
LEX = {
    "agreed": ["agreed", "has agreed"], "buy": ["buy", "acquire", "purchase", "take over"],
    "bought": ["bought", "acquired", "purchased", "taken over"], "said": ["said", "announced", "reported"],
    "named": ["named", "appointed", "picked", "chose"], "killed": ["killed", "left dead"],
    "hit": ["hit", "struck", "swept through", "tore through"], "officials": ["officials", "authorities"],
    "rose": {"up": ["rose", "climbed", "jumped", "increased"], "down": ["fell", "dropped", "declined", "slid"]},
    "increase": {"up": ["increase", "gain", "rise"], "down": ["decrease", "decline", "drop"]},
    "cut": {"cut": ["will cut", "plans to eliminate", "is eliminating"], "add": ["will add", "plans to create", "is adding"]},
    "cut_pp": {"cut": ["cut", "eliminated"], "add": ["created", "added"]},
    "cut_past": {"cut": ["would cut", "would eliminate"], "add": ["would add", "would create"]},
    "shed": {"cut": ["shed", "lay off"], "add": ["hire", "take on"]},
    "approved": {"yes": ["approved", "accepted", "signed off on"], "no": ["rejected", "threw out", "refused to approve"]},
    "approved_pp": {"yes": ["approved", "accepted"], "no": ["rejected", "thrown out"]},
    "will": {"yes": ["will", "plans to"], "no": ["will not", "has no plans to"]},
    "won": {"yes": ["won", "captured"], "no": ["lost", "was defeated in"]},
}

# --------------------------------------------------------------------------- MRPC frames

FRAMES = [
    {"slots": {"buyer": "company", "target": "company", "amount": "money", "day": "weekday"},
     "swap": ("buyer", "target"), "templates": [
        "{buyer} {agreed} to {buy} {target} for {amount}, the companies {said} on {day}.",
        "{target} has {agreed} to be {bought} by {buyer} in a deal worth {amount}.",
        "On {day}, {buyer} announced a {amount_a} deal to {buy} {target}.",
        "{buyer} will pay {amount} for {target}, according to a statement released on {day}.",
        "The {amount_a} purchase of {target} by {buyer} was announced on {day}."]},
    {"slots": {"company": "company", "quarter": "quarter", "pct": "percent", "amount": "money"},
     "pol": ["up", "down"], "templates": [
        "{company} said its {quarter}-quarter profit {rose} {pct} to {amount}.",
        "{quarter}-quarter net income at {company} {rose} {pct}, to {amount}, the company reported.",
        "{company} reported a {pct} {increase} in {quarter}-quarter earnings, to {amount}.",
        "Profit at {company} {rose} to {amount} in the {quarter} quarter, a {pct} {increase} from a year earlier."]},
    {"slots": {"company": "company", "person": "person", "old": "person", "title": "title"},
     "swap": ("person", "old"), "templates": [
        "{company} {named} {person} as its new {title}, replacing {old}.",
        "{person} will succeed {old} as {title} of {company}, the company {said}.",
        "{company} has appointed {person} {title}, succeeding {old}.",
        "{old} is being replaced as {title} of {company} by {person}.",
        "The board of {company} {named} {person} to take over from {old} as {title}."]},
    {"slots": {"company": "company", "count": "count", "city": "city", "day": "weekday"},
     "pol": ["cut", "add"], "templates": [
        "{company} {cut} {count} jobs at its {city} plant.",
        "About {count} jobs will be {cut_pp} at the {city} plant of {company}.",
        "{company} {said} on {day} that it {cut_past} {count} positions in {city}.",
        "The {city} factory of {company} will {shed} {count} workers, the company {said} on {day}."]},
    {"slots": {"company": "company", "pct": "percent", "price": "price", "day": "weekday"},
     "pol": ["up", "down"], "templates": [
        "Shares of {company} {rose} {pct} to {price} on {day}.",
        "{company} stock {rose} {pct} on {day}, closing at {price}.",
        "On {day}, shares in {company} {rose} {pct}, ending the session at {price}.",
        "{company} shares {rose} {pct} to close at {price} in {day} trading."]},
    {"slots": {"person": "person", "city": "city", "pct": "percent", "year": "year"},
     "pol": ["yes", "no"], "templates": [
        "{person} {won} the {year} race for mayor of {city} with {pct} of the vote.",
        "In {year}, {person} {won} the {city} mayoral election, taking {pct} of the ballots cast.",
        "With {pct} of the vote, {person} {won} the contest for mayor of {city} in {year}."]},
    {"slots": {"company": "company", "agency": "agency", "amount": "money", "city": "city", "day": "weekday"},
     "pol": ["yes", "no"], "templates": [
        "A federal judge in {city} {approved} the {amount_a} settlement between {company} and {agency}.",
        "The {amount_a} settlement {company} reached with {agency} was {approved_pp} by a federal judge in {city} on {day}.",
        "On {day}, a federal court in {city} {approved} the {amount_a} deal that {company} struck with {agency}."]},
    {"slots": {"company": "company", "product": "product", "city": "city", "month": "month"},
     "pol": ["yes", "no"], "templates": [
        "{company} {will} begin selling its {product} in {city} in {month}.",
        "Starting in {month}, {company} {will} offer its {product} to customers in {city}.",
        "{company} {said} it {will} launch the {product} in {city} in {month}."]},
    {"slots": {"count": "small", "event": "event", "city": "city", "day": "weekday"}, "templates": [
        "At least {count} people were killed when a {event} {hit} {city} on {day}.",
        "A {event} in {city} on {day} left at least {count} people dead, {officials} said.",
        "{officials} said {count} people died after a {event} {hit} {city} on {day}.",
        "The {event} that {hit} {city} on {day} killed at least {count} people."]},
    {"slots": {"city": "city", "rate": "rate", "month": "month", "office": "office"},
     "pol": ["up", "down"], "templates": [
        "Unemployment in {city} {rose} to {rate} in {month}, the {office} {said}.",
        "The {office} reported that the jobless rate in {city} {rose} to {rate} in {month}.",
        "The unemployment rate in {city} {rose} to {rate} in {month}, according to the {office}."]},
    {"slots": {"person": "person", "city": "city", "crime": "crime", "day": "weekday"}, "templates": [
        "{person} was arrested in {city} on {day} and charged with {crime}.",
        "Police in {city} arrested {person} on {day} on charges of {crime}.",
        "On {day}, police in {city} charged {person} with {crime} following an arrest.",
        "{person} faces charges of {crime} after being arrested by {city} police on {day}."]},
    {"slots": {"person": "person", "other": "person", "city": "city", "topic": "topic", "day": "weekday"},
     "templates": [
        "{person} met {other} in {city} on {day} to discuss {topic}.",
        "{person} and {other} held talks on {topic} in {city} on {day}.",
        "In {city} on {day}, {person} sat down with {other} for talks about {topic}.",
        "{topic} topped the agenda when {person} met {other} in {city} on {day}."]},
]

# --------------------------------------------------------------------------- slot values


def _company(rng: random.Random) -> str:
    first, second = rng.sample(STEMS, 2)
    return f"{first} {rng.choice(SUFFIXES)}" if rng.random() < 0.8 else f"{first} {second}"


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _sample(kind: str, rng: random.Random):
    """A raw value for a slot type (numbers stay numeric so they can be perturbed)."""
    if kind == "company":
        return _company(rng)
    if kind == "person":
        return _person(rng)
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


def _fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def _fill(template: str, values: dict, rng: random.Random) -> tuple[str, dict]:
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


def _say(frame: dict, fact: dict, template: str, rng: random.Random) -> str:
    """Render a fact; "{x_a}" is the attributive form of x ("a $5 million deal")."""
    values = {k: _forms(frame["slots"][k], v) for k, v in fact.items() if k in frame["slots"]}
    values.update({f"{k}_a": forms[:1] for k, forms in values.items()})
    return _fill(template, {**values, "pol": fact.get("pol")}, rng)[0]


# --------------------------------------------------------------------------- MRPC


def _new_fact(frame: dict, rng: random.Random) -> dict:
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


# Extra detail added to one sentence of some pairs (either label), as in real MRPC.
EXTRAS = [", according to a statement issued in {city}", ", {person}, a spokesperson, told reporters",
          ", {person}, an analyst at {company}, said", ", according to people familiar with the matter",
          ", {person} told reporters in {city}"]


def _elaborate(pair: tuple[str, str], rng: random.Random) -> tuple[str, str]:
    """Sometimes append an attribution clause (with new names) to one sentence of a pair."""
    i = rng.randrange(2)
    if rng.random() < 0.2 and not any(w in pair[i] for w in (" said", " reported", " announced", "ccording")):
        values = {"city": rng.choice(CITIES), "person": _person(rng), "company": _company(rng)}
        clause = _fill(rng.choice(EXTRAS), values, rng)[0]
        pair = (pair[0][:-1] + clause + ".", pair[1]) if i == 0 else (pair[0], pair[1][:-1] + clause + ".")
    return pair


def _mrpc_pair(label: int, rng: random.Random) -> tuple[str, str]:
    """A paraphrase (label 1) or a near-miss / unrelated pair (label 0)."""
    return _elaborate(_mrpc_sentences(label, rng), rng)


def _mrpc_sentences(label: int, rng: random.Random) -> tuple[str, str]:
    frame = rng.choice(FRAMES)
    t1, t2 = rng.sample(frame["templates"], 2)
    fact = _new_fact(frame, rng)
    if label == 1:
        return _say(frame, fact, t1, rng), _say(frame, fact, t2, rng)
    if rng.random() < 0.25:  # unrelated pair: other facts, often another frame
        other = rng.choice(FRAMES)
        return _say(frame, fact, t1, rng), _say(other, _new_fact(other, rng), rng.choice(other["templates"]), rng)
    shared = {f.removesuffix("_a") for f in _fields(t1)} & {f.removesuffix("_a") for f in _fields(t2)}
    shared &= set(frame["slots"])
    polar = any(isinstance(LEX.get(f), dict) for f in _fields(t1)) and any(
        isinstance(LEX.get(f), dict) for f in _fields(t2))
    shared |= {"pol"} if polar else set()
    return _say(frame, fact, t1, rng), _say(frame, _mutate(frame, fact, shared, rng), t2, rng)


def _mrpc_rows(n: int, rng: random.Random, seen: set, ids: set) -> list[str]:
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


# --------------------------------------------------------------------------- SQuAD

# Profile facts of a company; {ref}/{refs} become the name or "It"/"Its" etc.
PROFILE = {
    "founded": ["{company} was founded in {city} in {year} by {founder}.",
                "{founder} started {company} in {city} in {year}.",
                "{company} was established by {founder} in {year} in {city}."],
    "hq": ["{ref} is headquartered in {hq}.", "{refs} head office is in {hq}.",
           "{ref} has its headquarters in {hq}."],
    "staff": ["{ref} employs {employees} people.", "{ref} has about {employees} employees.",
              "{refs} workforce numbers roughly {employees} people."],
    "ceo": ["{refs} chief executive is {ceo}.", "{ceo} has been chief executive of {ref2} since {ceo_year}.",
            "Since {ceo_year}, {ref2} has been run by {ceo}."],
    "product": ["{ref} is best known for its {product}.", "{refs} best-selling product is the {product}."],
    "deal": ["In {deal_year}, {ref2} acquired {target} for {amount}.",
             "{ref} bought {target} for {amount} in {deal_year}."],
    "revenue": ["{ref} reported revenue of {revenue} in {rev_year}.",
                "In {rev_year}, {refs2} sales totaled {revenue}."],
    "listing": ["{refs} shares trade on the {exchange} under the symbol {ticker}.",
                "{ref} is listed on the {exchange}, where it trades as {ticker}."],
}
SLOT_FACT = {"city": "founded", "year": "founded", "founder": "founded", "hq": "hq", "employees": "staff",
             "ceo": "ceo", "ceo_year": "ceo", "product": "product", "target": "deal", "amount": "deal",
             "deal_year": "deal", "revenue": "revenue", "exchange": "listing", "ticker": "listing"}
QUESTIONS = [
    ("year", "When was {company} founded?"), ("year", "In what year was {company} established?"),
    ("city", "In which city was {company} founded?"), ("city", "Where was {company} started?"),
    ("founder", "Who founded {company}?"), ("founder", "Which person started {company}?"),
    ("hq", "Where is {company} headquartered?"), ("hq", "In which city is the head office of {company}?"),
    ("employees", "How many people does {company} employ?"),
    ("employees", "How many employees does {company} have?"),
    ("ceo", "Who is the chief executive of {company}?"), ("ceo", "Who runs {company}?"),
    ("ceo_year", "Since when has {ceo} been chief executive of {company}?"),
    ("product", "What is {company} best known for?"), ("product", "What is the best-selling product of {company}?"),
    ("target", "What company did {company} acquire in {deal_year}?"), ("target", "Which firm did {company} buy?"),
    ("amount", "How much did {company} pay for {target}?"), ("deal_year", "When did {company} acquire {target}?"),
    ("revenue", "What was the revenue of {company} in {rev_year}?"),
    ("revenue", "How much revenue did {company} report in {rev_year}?"),
    ("exchange", "On which exchange do shares of {company} trade?"),
    ("ticker", "What is the ticker symbol of {company}?"),
]


def _profile(company: str, rng: random.Random) -> dict:
    year = rng.randrange(1890, 2015)
    return {"company": company, "city": rng.choice(CITIES), "year": str(year), "founder": _person(rng),
            "hq": rng.choice(CITIES), "employees": f"{rng.randrange(2, 900) * 50:,}", "ceo": _person(rng),
            "ceo_year": str(rng.randrange(max(year, 1990), 2020)), "product": rng.choice(PRODUCTS),
            "deal_year": str(rng.randrange(max(year, 1980), 2021)), "target": _company(rng),
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
        sentence, local = _fill(rng.choice(PROFILE[fact]), values, rng)
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
    return f"{rng.getrandbits(96):024x}"


def _paragraph(company: str, flags: list[bool], rng: random.Random, dev: bool, other: str | None) -> dict:
    """One paragraph with len(flags) questions; True flags are unanswerable.

    ``other`` (v2 only, else None) is a company absent from the text: an unanswerable
    question either asks about a fact the text omits or asks about ``other``."""
    profile = _profile(company, rng)
    facts = [f for f in PROFILE if f in rng.sample(sorted(PROFILE), rng.randrange(3, 6))]
    text, spans = _context(profile, facts, rng)
    fits = [(s, q) for s, q in QUESTIONS if s in spans and all(f in spans or f == "company" for f in _fields(q))]
    missing = [(s, q) for s, q in QUESTIONS if SLOT_FACT[s] not in facts]
    qas, asked = [], set()
    for impossible in flags:
        pool = [(s, q) for s, q in (missing if impossible and rng.random() < 0.6 else fits) if s not in asked]
        if not pool:
            continue
        slot, q = rng.choice(pool)
        asked.add(slot)
        swap = impossible and SLOT_FACT[slot] in facts  # same question about a company not in the text
        question = _fill(q, {**profile, "company": other} if swap else profile, rng)[0]
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
    flags = [i < round(n / 3) for i in range(n)] if v2 else [False] * n
    rng.shuffle(flags)
    data, done = [], 0
    while done < n:
        company = _company(rng)
        if company in used:
            continue
        used.add(company)
        other = _company(rng) if v2 else None
        k = min(rng.randrange(3, 6), n - done)
        para = _paragraph(company, flags[done:done + k], rng, dev, other)
        if len(para["qas"]) < k or (other and other in para["context"]):  # retry with another paragraph
            continue
        done += k
        data.append({"title": company.replace(" ", "_"), "paragraphs": [para]})
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


# --------------------------------------------------------------------------- CLI


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, choices=["mrpc", "squad", "squad_v2"])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--train", type=int, help="train examples (mrpc 1600, squad 1200 questions)")
    parser.add_argument("--dev", type=int, help="dev examples (mrpc 400, squad 300 questions)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.task == "mrpc":
        paths = write_mrpc_demo(args.out, args.train or 1600, args.dev or 400, args.seed)
    else:
        paths = write_squad_demo(args.out, args.train or 1200, args.dev or 300, args.seed,
                                 version_2=args.task == "squad_v2")
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
