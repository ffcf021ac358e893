"""SQuAD features and post-processing: hand-built logits and a roundtrip
through the real (offline) BERT tokenizer."""

import numpy as np
import pytest

from workflow.scripts.data import qa_features
from workflow.scripts.data import qa

CONTEXT = "Hello brave new world"
# Characters: Hello [0,5) brave [6,11) new [12,15) world [16,21).
# Tokens: CLS, question, SEP, then the four context words, SEP.
OFFSETS = [None, None, None, (0, 5), (6, 11), (12, 15), (16, 21), None]
N_TOKENS = len(OFFSETS)


def logits(peaks, length=N_TOKENS, base=0.0):
    """A logit row that is `base` everywhere but at {index: value}."""
    row = np.full(length, base)
    for index, value in peaks.items():
        row[index] = value
    return row


def run(starts, ends, offsets=(OFFSETS,), ids=("e",), **kwargs):
    examples = {"id": ["e"], "context": [CONTEXT]}
    features = {"example_id": list(ids), "offset_mapping": list(offsets)}
    return qa.postprocess_predictions(examples, features, starts, ends,
                                      **kwargs)


# ---------------------------------------------------------- post-processing

def test_best_span_is_mapped_back_to_characters():
    predictions, null_odds = run([logits({4: 5.0})], [logits({6: 4.0})])
    assert predictions == {"e": "brave new world"}
    # null score 0 + 0 minus best span 5 + 4
    assert null_odds == {"e": -9.0}


def test_spans_outside_the_context_are_ignored():
    # the highest logits point at CLS / the question / the final SEP
    starts = [logits({0: 9.0, 1: 8.0, 3: 1.0})]
    ends = [logits({7: 9.0, 2: 8.0, 3: 1.0})]
    assert run(starts, ends)[0] == {"e": "Hello"}


def test_end_before_start_is_not_a_span():
    starts = [logits({5: 5.0, 3: 1.0})]
    ends = [logits({4: 5.0, 6: 1.0})]
    # (5,4) is invalid; best valid is start 5 with end 6 (5 + 1)
    assert run(starts, ends)[0] == {"e": "new world"}


def test_max_answer_length_limits_tokens():
    starts = [logits({3: 5.0, 5: 1.0})]
    ends = [logits({6: 5.0, 5: 1.0})]
    assert run(starts, ends)[0] == {"e": "Hello brave new world"}
    # with 2 tokens at most, (3,6) and (3,5) are too long: (5,6) wins
    assert run(starts, ends, max_answer_length=2)[0] == {"e": "new world"}


def test_n_best_spans_are_sorted_best_first():
    spans = qa.n_best_spans(logits({3: 3.0, 4: 2.0}), logits({5: 1.0, 6: 2.0}),
                            OFFSETS, n_best_size=2)
    assert [(s.start_char, s.end_char) for s in spans] == [
        (0, 21), (0, 15), (6, 21), (6, 15)]
    assert [s.score for s in spans] == [5.0, 4.0, 4.0, 3.0]
    assert spans[0] == qa.Span(5.0, 3.0, 2.0, 0, 21)


def test_n_best_size_limits_the_candidates():
    # the top start comes after the top end: with n_best_size=1 nothing
    # valid remains, with 2 the runner-up end is used
    starts = [logits({5: 5.0, 3: 1.0})]
    ends = [logits({3: 5.0, 6: 1.0})]
    assert run(starts, ends, n_best_size=1)[0] == {"e": ""}
    assert run(starts, ends, n_best_size=2)[0] == {"e": "new world"}


def test_best_span_across_windows_and_padded_rows():
    offsets_b = [None, None, (6, 11), (12, 15), None]
    # padded 2-D rows: the padding holds the largest logits and must be cut
    starts = np.array([logits({3: 1.0}), logits({2: 3.0, 6: 99.0})])
    ends = np.array([logits({3: 1.0}), logits({3: 3.0, 7: 99.0})])
    predictions, null_odds = run(starts, ends, offsets=(OFFSETS, offsets_b),
                                 ids=("e", "e"))
    assert predictions == {"e": "brave new"}
    assert null_odds == {"e": -6.0}


def test_version_2_null_threshold():
    starts = [logits({0: 4.0, 4: 2.0})]
    ends = [logits({0: 3.0, 4: 2.0})]  # null 7 vs span "brave" 4: odds 3
    assert run(starts, ends)[0] == {"e": "brave"}  # v1 never abstains
    predictions, null_odds = run(starts, ends, version_2=True)
    assert (predictions, null_odds) == ({"e": ""}, {"e": 3.0})
    predictions, _ = run(starts, ends, version_2=True,
                         null_score_diff_threshold=3.5)
    assert predictions == {"e": "brave"}


def test_null_score_is_the_smallest_over_windows():
    starts = [logits({0: 9.0, 4: 2.0}), logits({0: 1.0})]
    ends = [logits({0: 9.0, 4: 2.0}), logits({0: 1.0})]
    _, null_odds = run(starts, ends, offsets=(OFFSETS, OFFSETS),
                       ids=("e", "e"))
    assert null_odds == {"e": 2.0 - 4.0}


def test_mismatched_inputs_are_refused():
    with pytest.raises(qa.QAError, match="1 start and 1 end logit rows for"
                                         " 2 features"):
        run([logits({})], [logits({})], offsets=(OFFSETS, OFFSETS),
            ids=("e", "e"))
    with pytest.raises(qa.QAError, match="8 tokens but only 3 logits"):
        run([np.zeros(3)], [np.zeros(3)])
    with pytest.raises(qa.QAError, match="'e' has no features"):
        run([logits({})], [logits({})], ids=("other",))


# ------------------------------------------------------------------ features

@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    """The packaged MiniLM's BERT uncased tokenizer (conftest.py)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_dir)


FILLER = "Alpha beta gamma delta. " * 6
LONG = FILLER + "The capital of France is Paris."
EXAMPLES = {
    "id": ["paris", "nothing"],
    "question": ["  What is the capital of France?", "Who?"],
    "context": [LONG, "Short text."],
    "answers": [{"text": ["Paris"], "answer_start": [LONG.index("Paris")]},
                {"text": [], "answer_start": []}],
}


def test_train_features_answer_in_second_window(tokenizer):
    features = qa_features.prepare_train_features(EXAMPLES, tokenizer, max_length=32,
                                                  doc_stride=8)
    assert set(features) == {"input_ids", "token_type_ids", "attention_mask",
                             "start_positions", "end_positions"}
    lengths = [len(ids) for ids in features["input_ids"]]
    assert max(lengths) == 32 and min(lengths) < 32  # no padding
    windows = len(lengths) - 1  # the short example has one window
    assert windows >= 2
    positions = list(zip(features["start_positions"],
                         features["end_positions"]))
    assert positions[0] == (0, 0)  # first window misses the answer: CLS
    assert positions[-1] == (0, 0)  # unanswerable: CLS
    found = [i for i, (s, _) in enumerate(positions[:-1]) if s]
    assert found and found[0] >= 1
    for i in found:
        start, end = positions[i]
        ids = features["input_ids"][i][start:end + 1]
        assert tokenizer.decode(ids) == "paris"


def test_left_padding_puts_the_context_first(tokenizer):
    tokenizer.padding_side = "left"
    try:
        features = qa_features.prepare_train_features(EXAMPLES, tokenizer,
                                                      max_length=32, doc_stride=8)
    finally:
        tokenizer.padding_side = "right"
    i = next(i for i, s in enumerate(features["start_positions"]) if s)
    start, end = features["start_positions"][i], features["end_positions"][i]
    assert tokenizer.decode(features["input_ids"][i][start:end + 1]) == \
        "paris"
    assert features["token_type_ids"][i][start] == 0  # context is sequence 0


def test_eval_features_roundtrip_to_the_answer(tokenizer):
    train = qa_features.prepare_train_features(EXAMPLES, tokenizer, max_length=32,
                                               doc_stride=8)
    features = qa_features.prepare_eval_features(EXAMPLES, tokenizer, max_length=32,
                                                 doc_stride=8)
    assert features["input_ids"] == train["input_ids"]
    assert features["example_id"][0] == "paris"
    assert features["example_id"][-1] == "nothing"
    for ids, offsets, types in zip(features["input_ids"],
                                   features["offset_mapping"],
                                   features["token_type_ids"]):
        assert len(offsets) == len(ids)
        # offsets only on context tokens: type 1 and not the final [SEP]
        assert [o is not None for o in offsets] == [
            t == 1 for t in types[:-1]] + [False]
    # a model that is certain where training put the answer
    starts = [logits({s: 10.0}, len(ids)) for s, ids in
              zip(train["start_positions"], features["input_ids"])]
    ends = [logits({e: 10.0}, len(ids)) for e, ids in
            zip(train["end_positions"], features["input_ids"])]
    predictions, _ = qa.postprocess_predictions(
        EXAMPLES, features, starts, ends, version_2=True)
    assert predictions == {"paris": "Paris", "nothing": ""}


def test_postprocessing_accepts_datasets(tokenizer):
    datasets = pytest.importorskip("datasets")
    examples = datasets.Dataset.from_dict(EXAMPLES)
    features = examples.map(
        qa_features.prepare_eval_features, batched=True,
        fn_kwargs={"tokenizer": tokenizer, "max_length": 32,
                   "doc_stride": 8},
        remove_columns=examples.column_names)
    train = qa_features.prepare_train_features(EXAMPLES, tokenizer, max_length=32,
                                               doc_stride=8)
    starts = [logits({s: 1.0}, 40) for s in train["start_positions"]]
    ends = [logits({e: 1.0}, 40) for e in train["end_positions"]]
    predictions, _ = qa.postprocess_predictions(examples, features, starts,
                                                ends, version_2=True)
    assert predictions == {"paris": "Paris", "nothing": ""}
