"""Which levers of the training step (workflow/scripts/train/speed.py and
comm.py) a run uses: `auto` follows the rules stated there and in
docs/performance.md; the environment check records the choice and why in
environment.json."""

from __future__ import annotations

RULES = {
    "dropout": ("fast", "auto: 32-bit draws are faster than bernoulli_ on every CPU measured"),
    "attention": ("eager", "auto: with attention dropout the CPU sdpa kernel falls back to math; eager is faster"),
    "last_layer": ("first_token", "auto: a first-token classification head reads only the last layer's first "
                                  "token (BERT-style encoders); all for other heads and QA"),
    "embedding_grad": ("reuse", "auto: a table kept across steps, zeroing the rows last touched, instead of a "
                                "new one faulting in fresh pages every step (the same gradient, on every CPU)"),
    "embedding_allreduce": ("rows", "auto: ranks on one node all-reduce only the embedding rows some rank used "
                                    "(the same sum, bit for bit, and measured faster)"),
}
# Across nodes rows would send far less over slow links too, but the scaling
# plan (workflow/scripts/plan), which predicts multi-node runs, models the
# dense all-reduce: until it models rows, auto keeps the plan true there.
ACROSS_NODES = ("dense", "auto: across nodes the scaling plan models the dense all-reduce; rows (exact, far less "
                         "traffic) is set in train.speed")


def choose(dropout: str = "auto", attention: str = "auto", embedding_allreduce: str = "auto",
           last_layer: str = "auto", embedding_grad: str = "auto", nodes: int = 1,
           compression: str = "none") -> dict:
    """The levers and why (rules, not measurements: docs/performance.md has the figures)."""
    rules = RULES
    if nodes > 1:
        rules = {**RULES, "embedding_allreduce": ACROSS_NODES}
    elif compression != "none":  # the row all-reduce sends rows uncompressed; the hook compresses dense buckets
        rules = {**RULES, "embedding_allreduce": ("dense", f"auto: gradient_compression {compression} compresses "
                                                           "the dense all-reduce")}
    settings = {"dropout": dropout, "attention": attention, "embedding_allreduce": embedding_allreduce,
                "last_layer": last_layer, "embedding_grad": embedding_grad}
    picked = {k: rules[k][0] if v == "auto" else v for k, v in settings.items()}
    reasons = {k: rules[k][1] if v == "auto" else "set in train.speed" for k, v in settings.items()}
    return {"speed": picked, "speed_reason": reasons}
