"""Which levers of the training step (workflow/scripts/train/speed.py) a
run uses, typed: `train.speed` in the configuration is a `Levers` whose
values may be `auto`; `choose` turns it into one with none, and says why.
The environment check records both in environment.json (`levers`,
`levers_reason`), and every step reads them from there.

Adding a lever: its key in the schema (train.speed: the field of `Levers`),
a rule here, its function in train/speed.py (per model code: `SHARED` or
`TRANSFORMERS`, and `ENCODER` for cpuddp's encoder), and its test."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from workflow.scripts.settings.schema import View, derive, section_schema


class _Levers(View):
    """One value per lever (its field and default: the schema's train.speed);
    `auto` only in the settings, never once chosen."""

    @classmethod
    def of(cls, value: dict | Levers | None) -> Levers:
        if isinstance(value, cls):
            return value
        value = value or {}
        unknown = sorted(set(value) - set(names()))
        if unknown:
            raise ValueError(f"train.speed: unknown lever(s) {', '.join(unknown)}")
        return cls(**value)


Levers = derive("Levers", section_schema("train", "speed"), {}, bases=(_Levers,))


@dataclass(frozen=True)
class Context:
    """What an `auto` rule may look at: the run's layout."""
    nodes: int = 1
    compression: str = "none"


@dataclass(frozen=True)
class Rule:
    off: str | int
    """The value that leaves the step as torch and transformers have it (on
    cpuddp's encoder: its modules without the lever; attention, padding and
    softmax are built into it)."""
    auto: Callable[[Context], tuple[str | int, str]]
    """(value, why) for `auto` in this context."""
    needs: tuple = ()
    """(lever, value) pairs without which this lever does nothing."""
    exact: bool = True
    """On, the step computes what torch's does (apart from which dropout
    masks are drawn); a lever that is not is judged by accuracy over seeds."""


def _always(value: str | int, why: str) -> Callable[[Context], tuple[str | int, str]]:
    return lambda context: (value, f"auto: {why}")


def _embedding_allreduce(context: Context) -> tuple[str, str]:
    # Across nodes rows would send far less over slow links too, but the
    # scaling plan (workflow/scripts/plan), which predicts multi-node runs,
    # models the dense all-reduce: until it models rows, auto keeps it true.
    if context.nodes > 1:
        return "dense", ("auto: across nodes the scaling plan models the dense all-reduce; rows (exact, far less "
                         "traffic) is set in train.speed")
    if context.compression != "none":  # rows go uncompressed; the hook compresses dense buckets
        return "dense", f"auto: gradient_compression {context.compression} compresses the dense all-reduce"
    return "rows", ("auto: ranks on one node all-reduce only the embedding rows some rank used (the same sum, "
                    "bit for bit, and measured faster)")


def _allreduce(context: Context) -> tuple[str, str]:
    if context.nodes > 1:
        return "backend", "auto: ranks on several nodes all-reduce through the backend"
    if context.compression != "none":
        return "backend", f"auto: gradient_compression {context.compression} compresses through the backend"
    return "shm", ("auto: ranks on one node add their gradients through shared memory (the same sum; gloo's TCP "
                   "loopback cost 20 ms of each rank's CPU per 22 MB, AMD EPYC)")


# The reasons say where each lever acts: cpuddp's own encoder
# (train.model_code, train/encoder/), transformers' models, or both
# (train/speed.py puts each in place, or reports why not).
RULES: dict[str, Rule] = {
    "dropout": Rule("torch", _always("fast", "on transformers' models their nn.Dropout modules draw the keep-mask "
                                             "from 32-bit integers (faster than bernoulli_ on every CPU measured); "
                                             "on cpuddp's encoder it goes with dropout_mask hash (the hash kernel), "
                                             "else the encoder's dropout is torch's")),
    "dropout_bits": Rule(32, _always(16, "16, which no model code draws today: cpuddp's encoder's masks are the "
                                         "hash kernel's (p exact to 1/65536) or torch's, and on transformers' "
                                         "models fast dropout draws 32 bits (the exact levers only)"),
                         needs=(("dropout", "fast"),), exact=False),
    "attention": Rule("sdpa", _always("eager", "transformers' models: with attention dropout the CPU sdpa kernel "
                                               "falls back to math, and eager is faster; cpuddp's encoder has its "
                                               "own attention on packed tokens")),
    "embedding_allreduce": Rule("dense", _embedding_allreduce),
    "last_layer": Rule("all", _always("first_token", "cpuddp's encoder computes the last layer for the first "
                                                     "tokens alone under a first-token classification head "
                                                     "(every token for QA); transformers' models compute all")),
    "embedding_grad": Rule("torch", _always("reuse", "cpuddp's encoder writes the word embedding's gradient into "
                                                     "a table kept across steps, zeroing the rows last touched, "
                                                     "instead of a new one faulting in fresh pages every step (the "
                                                     "same gradient); transformers' models keep torch's")),
    "grad_buckets": Rule("copy", _always("direct", "cpuddp's encoder computes its linear layers' and the word "
                                                   "embedding's gradients straight into DDP's buckets, which "
                                                   "torch's backward makes new and DDP copies in (the same "
                                                   "gradients); transformers' models keep torch's")),
    "softmax": Rule("torch", _always("fp32", "fp32, as cpuddp's encoder computes it whatever this says (its "
                                             "attention's softmax in fp32, rounded once); transformers' models "
                                             "keep theirs"), exact=False),
    "padding": Rule("keep", _always("drop", "drop, as cpuddp's encoder computes it whatever this says (its "
                                            "loader packs the real tokens, which every layer and the loss take); "
                                            "transformers' models compute the padding"), exact=False),
    "allreduce": Rule("backend", _allreduce),
    "optimizer": Rule("torch", _always("one_pass", "under bf16_master one C kernel widens, clips and applies the "
                                                   "update and rounds the weights in one pass over memory, where "
                                                   "torch takes three; torch's arithmetic without its fused "
                                                   "multiply-adds; torch where no C compiler builds it"),
                      exact=False),
    "dropout_mask": Rule("stored", _always("hash", "cpuddp's encoder takes the keep-mask from a hash of the "
                                                   "element's index in one C pass, recomputed in backward instead "
                                                   "of drawn, stored and read back (with dropout fast; p exact to "
                                                   "1/65536; torch's dropout where no C compiler builds it); "
                                                   "transformers' models keep stored masks"),
                         needs=(("dropout", "fast"),), exact=False),
    "allocator": Rule("system", _always("keep", "both model codes: glibc's malloc keeps what a rank frees for the "
                                                "next step instead of faulting fresh, zeroed pages in every step "
                                                "(exact)")),
}


def names() -> list[str]:
    return [f.name for f in dataclasses.fields(Levers)]


def choose(settings: Levers, context: Context = Context()) -> tuple[Levers, dict[str, str]]:
    """The levers with every `auto` decided, and why each is what it is
    (rules, not measurements: docs/levers.md has the figures)."""
    chosen, reasons = {}, {}
    for name, value in settings.as_dict().items():
        if value == "auto":
            chosen[name], reasons[name] = RULES[name].auto(context)
        else:
            chosen[name], reasons[name] = value, "set in train.speed"
    return Levers(**chosen), reasons


def exact_only() -> Levers:
    """The settings of the exact path: every lever that is not exact off,
    the others auto (the reference of bench/accuracy_seeds.py)."""
    return Levers(**{name: "auto" if rule.exact else rule.off for name, rule in RULES.items()})


def all_off() -> Levers:
    """Every lever at its `off` value: the step as torch and transformers run
    it (on cpuddp's encoder its packed attention on real tokens and fp32
    softmax stay: they are built in)."""
    return Levers(**{name: rule.off for name, rule in RULES.items()})


def each_alone(context: Context = Context()) -> dict[str, Levers]:
    """Per lever whose `auto` turns it on here: that lever on, the others off."""
    on, _ = choose(Levers(), context)
    off = all_off()
    return {name: dataclasses.replace(off, **dict(RULES[name].needs), **{name: getattr(on, name)})
            for name in names() if getattr(on, name) != getattr(off, name)}
