"""The model card (common/card.py) read back with huggingface_hub's ModelCard,
deploy.push_to_hub through huggingface_hub (HfApi replaced at the Hub's
network boundary); its check before training is in test_hub_access.py."""

from __future__ import annotations

import re

import pytest
from huggingface_hub import ModelCard

from workflow.scripts.common import card
from workflow.scripts.common.tasks import get_task
from workflow.scripts.infer import deploy
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings.views import DeployView, TrainView

ENVIRONMENT = {"cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "sockets": 2, "physical_cores": 112,
               "isa_flags": ["avx512f", "amx_int8", "avx512_vnni"], "backend": "gloo", "precision": "bf16",
               "nodes": 2, "processes_per_node": 4, "threads_per_process": 14}
EVALUATION = {"eval": {"int8": {"samples_per_second": 812.5, "speedup_vs_fp32_same_runtime": 2.1,
                                "recommended": True, "recommendation": "int8 is 2.10x fp32 OpenVINO"}},
              "quantization": {"note": "int8 recommended; deploy/ holds int8 OpenVINO (from model_int8/)"}}
META = {"label": "int8 OpenVINO", "why": "fastest meeting the gates", "measured_on": "spr-112c",
        "metrics": {"accuracy": 0.86, "f1": 0.9, "loss": 0.3}}


def test_deploy_card_loads_with_its_metadata(tmp_path):
    config = DeployView.pick(cfg.validate({"experiment": "glue", "task": "mnli", "model": "bert-base-uncased",
                                           "train": {"learning_rate": 3e-5, "seed": 7}}))
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
    assert "| world_size | 8 |" in loaded.text and "| speedup_vs_fp32_same_runtime | 2.1 |" in loaded.text
    assert re.search(r"cpuddp commit `[0-9a-f]{40}`", loaded.text)  # this checkout's HEAD


def test_train_card_has_no_results_and_a_local_base_model_by_name(tmp_path):
    folder = tmp_path / "run" / "model"
    folder.mkdir(parents=True)
    view = TrainView.pick(cfg.validate({"task": "cola", "model": str(tmp_path / "my-bert")}))
    card.write_train_card(folder, view, ENVIRONMENT, ENVIRONMENT)
    loaded = ModelCard.load(folder / card.CARD_FILE)
    assert loaded.data.base_model == "my-bert" and loaded.data.eval_results is None
    assert loaded.data.datasets == [get_task("cola").hub_path] and "## Deployment" not in loaded.text


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
