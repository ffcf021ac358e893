"""The docs lane's check (`make docs`): every `snakemake` command in README.md
and docs/*.md dry-runs, in a scratch folder that holds what the pages say the
commands need (a 4-node hostfile, the SQuAD JSON files under data/squad/, and
the Hub models of config.yaml and the experiments in its Hugging Face cache as
`hf download` leaves them: the Hub is offline here, and the config check
stops a model it cannot have).

A command whose recipe fixes more threads per rank than this machine has
(the blog's 28) passes when its dry run stops at exactly that one-line
config check: the command is right, this machine is not the recipe's."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINKED = ("Snakefile", "config.yaml", "workflow", "profiles", "experiments", "envs")
NEEDED = {"hostfile": "localhost\nnode2\nnode3\nnode4\n",
          **{f"data/squad/{s}-v{v}.json": "{}" for s in ("train", "dev") for v in ("1.1", "2.0")}}
COMMAND = re.compile(r"^\s*(?:\$ )?((?:\.venv/bin/)?snakemake\s.*)$")
INLINE = re.compile(r"`((?:\.venv/bin/)?snakemake --profile [^`]*)`")
SMALL_MACHINE = "distributed.required_threads_per_process: the recipe needs"


def commands(text: str) -> list[str]:
    """Commands of code blocks (with `\\` continuations) and inline code spans."""
    found, lines = [], iter(text.splitlines())
    for line in lines:
        match = COMMAND.match(line)
        while match and line.rstrip().endswith("\\"):
            line = line.rstrip()[:-1] + " " + next(lines, "")
        if match:
            found.append(COMMAND.match(line).group(1).split(" #")[0].strip())
    found += INLINE.findall(text)
    return [c for c in found if "..." not in c and "<" not in c]


def dry_run_argv(command: str) -> list[str]:
    """The command as a dry run of this checkout's snakemake (a --report becomes the dry run)."""
    words = shlex.split(command)
    argv, skip = [str(BIN / "snakemake")], False
    for word in words[1:]:
        if skip or word == "--report":
            skip = not skip
            continue
        argv.append(word)
    return argv + ["-n", "--quiet"]


def hub_models() -> set[str]:
    """The Hub ids that config.yaml and the experiment files train (a sweep's too)."""
    import yaml

    sys.path.insert(0, str(REPO))
    from workflow.scripts.settings.model_id import is_hub_id_form

    models = set()
    for path in [REPO / "config.yaml", *sorted((REPO / "experiments").glob("*.yaml"))]:
        config = yaml.safe_load(path.read_text()) or {}
        models |= {config.get("model"), *((config.get("sweep") or {}).get("model") or [])}
    return {m for m in models if isinstance(m, str) and not m.startswith("pkg:") and is_hub_id_form(m)}


def cache_model(home: Path, model: str) -> None:
    """`model`'s config and (empty) weights in the Hub cache under `home`, as `hf download` leaves them."""
    repo = home / ".cache/huggingface/hub" / ("models--" + model.replace("/", "--"))
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs/main").write_text("0" * 40)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"")


def scratch() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="doc-commands-"))
    for model in hub_models():
        cache_model(folder, model)
    for name in LINKED:
        (folder / name).symlink_to(REPO / name)
    for name, content in NEEDED.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(content)
    return folder


def check(command: str, folder: Path) -> str | None:
    """None when the command dry-runs, else why not."""
    done = subprocess.run(dry_run_argv(command), cwd=folder, capture_output=True, text=True, timeout=300,
                          env={"PATH": f"{BIN}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(folder)})
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error: ")]
    if done.returncode == 0 or (len(errors) == 1 and SMALL_MACHINE in errors[0]):
        return None
    return (errors or (done.stdout + done.stderr).strip().splitlines()[-1:] or ["?"])[-1]


def main() -> int:
    found = {(c, p.relative_to(REPO)) for p in PAGES for c in commands(p.read_text())}
    unique = sorted({c for c, _ in found})
    folder = scratch()
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(unique, pool.map(lambda c: check(c, folder), unique)))
    failed = {c: why for c, why in results.items() if why}
    for command, why in failed.items():
        pages = ", ".join(sorted(str(p) for c, p in found if c == command))
        print(f"{pages}: `{command}` does not dry-run: {why}", file=sys.stderr)
    print(f"doc commands: {len(unique) - len(failed)} of {len(unique)} dry-run")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
