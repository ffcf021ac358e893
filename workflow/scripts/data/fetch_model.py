"""Fetch a Hub model once, on the launch node (or the Slurm login node),
into a folder the ranks load with the Hub offline (data/model_copy.py).
It goes through the Hugging Face cache (HF_HOME), so a model pre-fetched
there (`hf download <id>`) is copied without the network.

    python -m workflow.scripts.data.fetch_model --model ID --out results/<experiment>/data/models/<model>
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from workflow.scripts.common.atomic import follow_umask
from workflow.scripts.settings import step
from workflow.scripts.common.errors import UserError, first_line

# Config, safetensors weights and tokenizer files: no pickle weights (unsafe)
# and no TensorFlow / Flax / ONNX copies, which the ranks never read.
FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.py"]
HINT = ("where the nodes have no internet, pre-fetch it on a node that has (`hf download {model}`, "
        "into the same HF_HOME) or set model: to a local folder (see docs/clusters.md, Nodes without internet)")


def download(model: str) -> Path:
    """The model's snapshot in the Hugging Face cache (downloaded when missing)."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model, allow_patterns=FILES))
    except Exception as err:  # offline, unknown id, gated: the hub raises many kinds
        raise UserError(f"cannot fetch model '{model}' from the Hugging Face Hub ({first_line(err)}); "
                        + HINT.format(model=model)) from None


def fetch(model: str, out: Path) -> Path:
    """Copy the snapshot's files (not the cache's symlinks) into `out`, whole or not at all."""
    snapshot = download(model)
    if not any(snapshot.glob("*.safetensors")):
        raise UserError(f"model '{model}' on the Hub has no safetensors weights; convert it or set model: "
                        "to a local folder with model.safetensors")
    partial = out.with_name(out.name + ".cpuddp-tmp")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(snapshot, partial, symlinks=False)
    follow_umask(partial)  # copytree keeps the cache's modes, not this user's umask
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a Hub id")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    out = fetch(args.model, args.out)
    print(f"model {args.model}: {len(list(out.iterdir()))} files in {out}", file=sys.stderr)


if __name__ == "__main__":
    step.entry(main)
