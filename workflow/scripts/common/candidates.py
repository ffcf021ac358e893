"""The evaluated models of a run, by name: which exist, how tables label
them, and where each lives in a run folder.

The INT8 stage (infer/) writes these names and the report (report/) reads
them; both import them from here, so that the report needs nothing of the
stage that measures.
"""

from __future__ import annotations

# The candidates, in the order of the tables; ties go to the first (the simplest to run).
CANDIDATES = ("fp32", "fp32_openvino", "int8")
# eval.fp32 runs at the run's precision (bf16 autocast where train.precision chose bf16), hence no "fp32" in its label.
LABELS = {"fp32": "eager PyTorch", "fp32_openvino": "fp32 OpenVINO", "int8": "int8 OpenVINO"}
# Where each candidate lives in a run folder (results/<experiment>/<run>/).
FOLDERS = {"fp32": "model", "fp32_openvino": "model_openvino", "int8": "model_int8"}
DEPLOY_FOLDER, DEPLOY_FILE = "deploy", "deploy.json"  # the model to ship, and what it is
