"""What cpuddp's own encoder needs to know of a transformers config of the
BERT family: one frozen Spec, read once when the model is built, so that
nothing below reads the transformers config again."""

from __future__ import annotations

from dataclasses import dataclass

# model_type -> (our family kind, the base model prefix of its transformers heads)
FAMILY = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "camembert": "roberta",
          "electra": "electra", "distilbert": "distilbert"}
TASKS = ("classification", "qa")


@dataclass(frozen=True)
class Spec:
    kind: str
    """bert, roberta (also XLM-R and CamemBERT), electra or distilbert: the layout of weights and heads."""
    task: str
    """classification (with problem_type) or qa (start and end logits)."""
    vocab: int
    embedding: int
    """Width of the embeddings (ELECTRA's may differ from hidden: then a projection follows)."""
    hidden: int
    heads: int
    intermediate: int
    layers: int
    positions: int
    token_types: int
    """0: no token-type embedding (DistilBERT)."""
    pad_id: int
    eps: float
    activation: str
    hidden_dropout: float
    attention_dropout: float
    attention_output_dropout: float
    """Dropout after the attention's output projection (DistilBERT has none)."""
    head_dropout: float
    num_labels: int
    problem_type: str | None

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads

    @property
    def roberta_positions(self) -> bool:
        """Positions count from pad_id + 1 (fairseq's make_positions)."""
        return self.kind == "roberta"


def why_not(config, task: str, trust_remote_code: bool = False) -> str | None:
    """One line on why this config is outside what the encoder serves, else
    None. A model with code of its own (auto_map in its config, or loaded
    with trust_remote_code) is never the encoder's, whatever model_type it
    declares: the encoder would train other code than the model's."""
    if auto_map := getattr(config, "auto_map", None):
        return (f"the model brings its own modeling code (auto_map in its config: {', '.join(auto_map)}), "
                "which cpuddp's encoder would not run")
    if trust_remote_code:
        return "trust_remote_code is set: the model's own code runs, not cpuddp's encoder"
    family = FAMILY.get(getattr(config, "model_type", None))
    if family is None:
        return f"model type {getattr(config, 'model_type', '?')} is not of the BERT family ({', '.join(FAMILY)})"
    if task not in TASKS:
        return f"task kind {task} is neither of {', '.join(TASKS)}"
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        return "the config is a decoder's"
    if getattr(config, "position_embedding_type", "absolute") not in ("absolute", None):
        return f"position_embedding_type {config.position_embedding_type} (only absolute positions)"
    if getattr(config, "chunk_size_feed_forward", 0):
        return "chunk_size_feed_forward is set"
    act = getattr(config, "activation" if family == "distilbert" else "hidden_act", "gelu")
    if not isinstance(act, str):
        return f"the activation is a {type(act).__name__}, not a name"
    if task == "qa" and config.num_labels != 2:
        return f"a QA head with {config.num_labels} outputs, not 2"
    return None


def spec_of(config, task: str) -> Spec:
    """The Spec of a transformers config that why_not accepts."""
    kind = FAMILY[config.model_type]
    if kind == "distilbert":
        sizes = dict(embedding=config.dim, hidden=config.dim, heads=config.n_heads, intermediate=config.hidden_dim,
                     layers=config.n_layers, token_types=0, eps=1e-12, activation=config.activation)
        dropouts = dict(hidden_dropout=config.dropout, attention_dropout=config.attention_dropout,
                        attention_output_dropout=0.0,
                        head_dropout=config.qa_dropout if task == "qa" else config.seq_classif_dropout)
    else:
        sizes = dict(embedding=getattr(config, "embedding_size", config.hidden_size), hidden=config.hidden_size,
                     heads=config.num_attention_heads, intermediate=config.intermediate_size,
                     layers=config.num_hidden_layers, token_types=config.type_vocab_size, eps=config.layer_norm_eps,
                     activation=config.hidden_act)
        classifier = getattr(config, "classifier_dropout", None)
        dropouts = dict(hidden_dropout=config.hidden_dropout_prob,
                        attention_dropout=config.attention_probs_dropout_prob,
                        attention_output_dropout=config.hidden_dropout_prob,
                        head_dropout=config.hidden_dropout_prob if classifier is None else classifier)
    return Spec(kind=kind, task=task, vocab=config.vocab_size, positions=config.max_position_embeddings,
                pad_id=config.pad_token_id if config.pad_token_id is not None else 0, num_labels=config.num_labels,
                problem_type=config.problem_type, **sizes, **dropouts)
