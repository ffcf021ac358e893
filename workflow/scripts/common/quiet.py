"""Third-party warnings a user of cpuddp cannot act on, silenced in every
step and rank (common/errors.run_cli installs the filters before main).

This is the one place: each entry names what it silences and why no user
could act on it. A warning from cpuddp's own code is never silenced here:
it is a defect to fix where it is raised (tests/integration/
test_demo_experiments.py fails on one in a default run's logs).
"""

from __future__ import annotations

import warnings

# (category, message regex, module regex of the code the warning names, why it is silenced)
SILENCED = (
    (FutureWarning, r"`is_gradient_checkpointing` is deprecated", r"transformers\.modeling_utils",
     "transformers' deprecated alias, read by peft's get_peft_model (train.lora) and by torch.jit's tracer "
     "under OpenVINO's PyTorch frontend (convert_openvino, which reads every property of the model); no "
     "cpuddp code calls it"),
    (Warning, r"Converting a tensor to a Python boolean might cause the trace to be incorrect",
     r"transformers\.",
     "convert_openvino: torch.jit's TracerWarning on transformers' attention-mask code, traced at one shape; "
     "the IR is exported with dynamic shapes and evaluate_runtimes scores it against eager fp32 (the "
     "accuracy gate), which catches a wrong trace"),
)


def install() -> None:
    """Ignore the SILENCED warnings in this process (each filter as narrow as its entry)."""
    for category, message, module, _why in SILENCED:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
