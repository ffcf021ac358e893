"""A tokenizer without a pad token (GPT-2, Qwen2, Llama) pads with its eos
token, said in one line, and the model's config learns that pad id."""

from __future__ import annotations

import pytest

from workflow.scripts.common import modeling, tasks
from workflow.scripts.common.errors import UserError


@pytest.fixture
def decoder_dir(tmp_path, minilm_dir):
    """A tiny GPT-2 whose tokenizer (MiniLM's, as a decoder's) has an eos token and no pad token."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    tokenizer.pad_token, tokenizer.eos_token = None, "[SEP]"
    tokenizer.save_pretrained(tmp_path)
    torch.manual_seed(0)
    transformers.GPT2Model(transformers.GPT2Config(vocab_size=30522, n_embd=16, n_layer=1, n_head=2,
                                                   n_positions=64)).save_pretrained(tmp_path)
    return tmp_path


def test_no_pad_token_pads_with_eos_and_says_so(decoder_dir, capsys):
    tokenizer = modeling.load_tokenizer(str(decoder_dir))
    assert tokenizer.pad_token == "[SEP]" and tokenizer.pad_token_id == 102
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "has no pad token; padding with its eos token '[SEP]' (id 102)" in line
    model = modeling.load_model(str(decoder_dir), tasks.get_task("mrpc"), tokenizer=tokenizer)
    assert model.config.pad_token_id == 102  # GPT-2's classifier finds each row's last token by it
    batch = tokenizer(["a b c", "a"], padding=True, return_tensors="pt")
    assert model(**batch).logits.shape == (2, 2)


def test_a_tokenizer_with_a_pad_token_is_left_alone(minilm_dir, capsys):
    assert modeling.load_tokenizer(str(minilm_dir)).pad_token == "[PAD]"
    assert capsys.readouterr().err == ""


def test_neither_pad_nor_eos_is_one_line(decoder_dir):
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(decoder_dir)
    tokenizer.eos_token = None
    with pytest.raises(UserError, match="neither a pad nor an eos token") as err:
        modeling.with_pad_token(tokenizer, "m")
    assert "\n" not in str(err.value)
