"""train.lora through the real workflow: 2 ranks of the tiny BERT train
peft's adapters. Only the adapters and the head change, DDP all-reduces
only their gradients, the saved model is a plain transformers model with
the adapters merged (or, with merge false, peft's adapter folder that the
evaluation loads), and a run killed mid-training resumes to the same
weights as an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from helpers.faults import RUN
from helpers.workflow import snakemake, tiny_experiment, write_config

TARGET = str(RUN / "train_metrics.json")
LORA = {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": "auto"}
CHANGED = ("attention.self.query.weight", "attention.self.value.weight")  # the merged adapters' weights


def experiment(work: Path, model: Path, **lora) -> Path:
    """12 steps, an evaluation every 3 (the killed run's fault point) and then a checkpoint."""
    configfile = tiny_experiment(work, model, lora={**LORA, **lora}, checkpoint_every=3)
    config = yaml.safe_load(configfile.read_text())
    config["evaluation"] = {"batch_size": 16, "every": 3}
    config["distributed"]["retries"] = 0  # a killed try stays failed
    return write_config(configfile, config)


def trained_weights(work: Path) -> str:
    ranks = json.loads((work / TARGET).read_text())["ranks"]
    assert len({r["weights_sha256"] for r in ranks}) == 1
    return ranks[0]["weights_sha256"]


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def test_lora_trains_adapters_merges_and_resumes_exactly(tmp_path, tiny_model_dir, monkeypatch):
    from transformers import AutoModelForSequenceClassification

    reference, broken = tmp_path / "reference", tmp_path / "broken"
    reference.mkdir(), broken.mkdir()
    snakemake(reference, experiment(reference, tiny_model_dir), TARGET)  # the model and its weights' digest
    log = (reference / "logs/train_ddp/tiny/default.log").read_text()
    assert "model code: transformers (auto: train.lora" in log
    assert "lora: r 4, alpha 8, dropout 0.1 on query, value (auto: peft's table for bert)" in log
    assert "embedding_allreduce off: the word embedding is frozen" in log or "embedding_allreduce off (" in log

    merged = load_file(reference / RUN / "model" / "model.safetensors")
    assert not [k for k in merged if "lora_" in k or "modules_to_save" in k]
    base = load_file(tiny_model_dir / "model.safetensors")
    for name, tensor in merged.items():
        inner = name.removeprefix("bert.")
        if name.startswith("classifier."):
            continue  # the head: new, and trained in full
        assert inner in base, name
        assert torch.equal(tensor, base[inner]) != inner.endswith(CHANGED), name  # only the adapted ones moved
    model = AutoModelForSequenceClassification.from_pretrained(reference / RUN / "model").eval()
    assert not [n for n, _ in model.named_modules() if "lora_" in n]

    configfile = experiment(broken, tiny_model_dir, merge=False)
    with monkeypatch.context() as patch:  # rank 1 dies at step 6's evaluation, before its checkpoint
        patch.setenv("CPUDDP_FAULT", "second-evaluation:1")
        assert snakemake(broken, configfile, TARGET, check=False).returncode != 0
    assert sorted(p.name for p in (broken / RUN / "checkpoints").glob("step-*")) == ["step-00000003"]
    snakemake(broken, configfile, str(RUN / "eval_fp32.json"))  # resumes, saves the adapters, evaluates them
    metrics = json.loads((broken / TARGET).read_text())
    assert metrics["resumed_from_step"] == 3 and metrics["steps"] == 12
    assert trained_weights(broken) == trained_weights(reference)  # exact resume

    folder = broken / RUN / "model"
    assert (folder / "adapter_config.json").exists() and not (folder / "model.safetensors").exists()
    adapters = load_file(folder / "adapter_model.safetensors")
    assert any("lora_A" in k for k in adapters) and any("classifier" in k for k in adapters)
    buckets = metrics["ranks"][0]["step_split"]["buckets"]  # DDP reduced the adapters and the head alone
    assert sum(b["bytes"] for b in buckets) == sum(t.numel() * t.element_size() for t in adapters.values())
    unmerged = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    ids = torch.randint(1000, 2000, (2, 12), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(logits(unmerged, ids), logits(model, ids), atol=1e-5)
    evaluated = json.loads((broken / RUN / "eval_fp32.json").read_text())
    assert evaluated and (broken / "logs/evaluate_fp32/tiny/default.log").exists()
