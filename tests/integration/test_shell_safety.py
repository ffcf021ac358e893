"""A config value never reaches a shell: a model id with shell syntax stops
the workflow when it is parsed, with one line, and its command never runs."""

from __future__ import annotations

import pytest

from helpers.workflow import snakemake, write_config


@pytest.mark.parametrize("template", ["a/b;touch {x}", "a/b$(touch {x})"], ids=["semicolon", "substitution"])
def test_a_model_id_with_shell_syntax_is_refused_and_never_run(tmp_path, template):
    x = tmp_path / "X"
    model = template.format(x=x)
    configfile = write_config(tmp_path / "bad.yaml", {"experiment": "bad", "task": "mrpc", "model": model})
    done = snakemake(tmp_path, configfile, check=False, timeout=300)
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: config error: model: {model!r} is neither a folder here nor a Hugging Face Hub id "
                      "(name or namespace/name: letters, digits, '-', '_', '.', at most 96 each, no '--' or '..')"], \
        done.stderr
    assert not x.exists()
    assert not (tmp_path / "results").exists()
