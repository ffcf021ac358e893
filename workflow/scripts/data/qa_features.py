"""Extractive QA (SQuAD) features for tokenization, torch-free.

Follows transformers' examples (run_qa.py): contexts longer than max_length
are split into overlapping windows ("features") of one example. Train
features point at the answer's first and last token; eval features keep
their example id and the offsets that post-processing (data/qa.py) maps back
to characters of the context. Features are NOT padded (padding=False):
batches are padded later, so each feature has its own length.
"""

from __future__ import annotations


def prepare_train_features(examples: dict, tokenizer, max_length: int = 384,
                           doc_stride: int = 128) -> dict[str, list]:
    """Tokenize a batch of SQuAD examples (question, context, answers) into
    windows with start_positions/end_positions; a window that does not hold
    the (first) answer, or an unanswerable question, points at CLS."""
    encoded = _tokenize(examples, tokenizer, max_length, doc_stride)
    sample_map = encoded.pop("overflow_to_sample_mapping")
    offsets_all = encoded.pop("offset_mapping")
    context = _context_sequence(tokenizer)
    starts, ends = [], []
    for i, offsets in enumerate(offsets_all):
        cls = _cls_index(encoded["input_ids"][i], tokenizer)
        answers = examples["answers"][sample_map[i]]
        context_tokens = [k for k, seq in enumerate(encoded.sequence_ids(i))
                          if seq == context]
        start, end = _answer_tokens(offsets, context_tokens, answers, cls)
        starts.append(start)
        ends.append(end)
    return {**encoded, "start_positions": starts, "end_positions": ends}


def prepare_eval_features(examples: dict, tokenizer, max_length: int = 384,
                          doc_stride: int = 128) -> dict[str, list]:
    """Tokenize a batch of SQuAD examples into windows that keep their
    example_id and an offset_mapping that is None outside the context, so
    that post-processing can only pick spans of the context."""
    encoded = _tokenize(examples, tokenizer, max_length, doc_stride)
    sample_map = encoded.pop("overflow_to_sample_mapping")
    context = _context_sequence(tokenizer)
    encoded["example_id"] = [examples["id"][s] for s in sample_map]
    encoded["offset_mapping"] = [
        [o if seq == context else None
         for o, seq in zip(offsets, encoded.sequence_ids(i))]
        for i, offsets in enumerate(encoded["offset_mapping"])]
    return dict(encoded)


def _tokenize(examples: dict, tokenizer, max_length: int, doc_stride: int):
    """Question and context as a pair, the context truncated into windows
    overlapping by doc_stride tokens; the order follows the padding side."""
    # Leading spaces in questions waste tokens and can make truncation fail.
    questions = [q.lstrip() for q in examples["question"]]
    contexts = examples["context"]
    pad_on_right = tokenizer.padding_side == "right"
    return tokenizer(
        questions if pad_on_right else contexts,
        contexts if pad_on_right else questions,
        truncation="only_second" if pad_on_right else "only_first",
        max_length=min(max_length, tokenizer.model_max_length),
        stride=doc_stride, return_overflowing_tokens=True,
        return_offsets_mapping=True, padding=False)


def _context_sequence(tokenizer) -> int:
    """Which sequence of the pair (0 or 1) is the context."""
    return 1 if tokenizer.padding_side == "right" else 0


def _cls_index(input_ids: list[int], tokenizer) -> int:
    """Position of CLS (or BOS), the "no answer" target."""
    for token_id in (tokenizer.cls_token_id, tokenizer.bos_token_id):
        if token_id is not None and token_id in input_ids:
            return input_ids.index(token_id)
    return 0


def _answer_tokens(offsets, context_tokens: list[int], answers: dict,
                   cls: int) -> tuple[int, int]:
    """Token start and end of the first answer, or (cls, cls) when there is
    none or it is not fully inside this window's context."""
    if not answers["answer_start"]:
        return cls, cls
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    first, last = context_tokens[0], context_tokens[-1]
    if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
        return cls, cls
    # Walk in from both ends; bounded to the context, unlike run_qa, so an
    # answer in the last (or first) context token cannot land on [SEP].
    start = first
    while start <= last and offsets[start][0] <= start_char:
        start += 1
    end = last
    while end >= first and offsets[end][1] >= end_char:
        end -= 1
    return start - 1, end + 1
