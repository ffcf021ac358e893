"""Tokenize step: the model's tokenizer, no padding (batches pad later)."""

from __future__ import annotations

import hashlib

import datasets

from workflow.scripts.common import tasks

from workflow.scripts.settings import step
from workflow.scripts.common.atomic import atomic_dir
from workflow.scripts.common.modeling import load_tokenizer
from workflow.scripts.settings.views import TokenizeTrain, TokenizeView
from workflow.scripts.data import qa_features

datasets.disable_progress_bars()


def encode_pairs(task: tasks.Task, tokenizer, max_length: int):
    """Batched map function for classification and regression tasks."""
    def encode(batch):
        texts = [batch[column] for column in task.text_columns if column in batch]
        encoded = tokenizer(*texts, truncation=True, max_length=max_length)
        encoded["labels"] = batch["label"]
        return encoded
    return encode


def tokenize_split(task, tokenizer, split_name: str, split, train: TokenizeTrain):
    """One split; QA train and eval splits need different features (positions vs offsets)."""
    if not task.is_qa:
        encode = encode_pairs(task, tokenizer, train.max_seq_length)
    elif split_name == "train":
        encode = lambda b: qa_features.prepare_train_features(  # noqa: E731
            b, tokenizer, train.max_seq_length, train.doc_stride)
    else:
        encode = lambda b: qa_features.prepare_eval_features(  # noqa: E731
            b, tokenizer, train.max_seq_length, train.doc_stride)
    # In memory, and named by what it is made of: datasets would otherwise write a cache
    # file into the data step's folder and pickle the tokenizer to name it (0.6-0.8 s a step).
    made_of = repr((split._fingerprint, split_name, tokenizer.name_or_path, train.max_seq_length, train.doc_stride))
    tokenized = split.map(encode, batched=True, remove_columns=split.column_names, keep_in_memory=True,
                          new_fingerprint=hashlib.sha256(made_of.encode()).hexdigest()[:32],
                          desc=f"tokenize {split_name}")
    if "label" in split.features:  # the label names travel with the data (own tasks read them there)
        tokenized = tokenized.cast_column("labels", split.features["label"])
    return tokenized


def tokenize(config: TokenizeView, raw: datasets.DatasetDict) -> datasets.DatasetDict:
    """Every split of the data step's output, with the run's tokenizer."""
    task = tasks.for_data(config.task, next(iter(raw.values())).features)
    tokenizer = load_tokenizer(config.model, config.trust_remote_code)
    return datasets.DatasetDict({
        name: tokenize_split(task, tokenizer, name, split, config.train) for name, split in raw.items()
    })


def main(argv=None) -> None:
    parser = step.parser(__doc__)
    parser.add_argument("--data", required=True, help="Arrow DatasetDict from the data step")
    parser.add_argument("--out", required=True, help="folder for the tokenized DatasetDict")
    args = parser.parse_args(argv)
    config = step.read_view(args, TokenizeView)
    tokenized = tokenize(config, datasets.load_from_disk(args.data))
    with atomic_dir(args.out) as tmp:
        tokenized.save_to_disk(str(tmp))
    print("tokenized: " + ", ".join(f"{k} {len(v)} features" for k, v in tokenized.items()))


if __name__ == "__main__":
    step.entry(main)
