"""Dataset step: the Hub or local files -> a DatasetDict in Arrow form."""

from __future__ import annotations


import datasets

from workflow.scripts.settings import step
from workflow.scripts.common import tasks
from workflow.scripts.common.atomic import atomic_dir
from workflow.scripts.settings.views import DataView
from workflow.scripts.data.hub_check import require_hub
from workflow.scripts.data.sources import load_hub, load_local

datasets.disable_progress_bars()


def load(config: DataView):
    """Local files when the config names them, else the Hub."""
    task = tasks.get_task(config.task)
    if config.data and getattr(config.data, "dataset", None):
        require_hub(task, f"dataset {config.data.dataset!r}")
    if config.data:
        keys = ("train", "validation", "validation_mismatched")
        files = {k: getattr(config.data, k) for k in keys if getattr(config.data, k)}
        return load_local(task, files, config.data.format, config.data)
    require_hub(task, "/".join(filter(None, (task.hub_path, task.hub_config))))
    return load_hub(task)


def main(argv=None) -> None:
    parser = step.parser(__doc__)
    parser.add_argument("--out", required=True, help="folder for the Arrow DatasetDict")
    args = parser.parse_args(argv)
    config = step.read_view(args, DataView)
    dataset = load(config)
    with atomic_dir(args.out) as tmp:
        dataset.save_to_disk(str(tmp))
    sizes = ", ".join(f"{split} {len(ds)}" for split, ds in dataset.items())
    print(f"data: {config.task}: {sizes}")


if __name__ == "__main__":
    step.entry(main)
