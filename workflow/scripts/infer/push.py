"""Upload a deploy/ folder to a Hub model repo (rule deploy_push, after
deploy_model, on this node: a local rule, where the config check asked the
Hub before training). A failed upload keeps the folder, and its one line is
the command that uploads it later:

    cd <cpuddp> && .venv/bin/python -m workflow.scripts.infer.push <folder>/deploy <user/name>
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from workflow.scripts.common.atomic import write_json
from workflow.scripts.common.errors import UserError, first_line
from workflow.scripts.infer.deploy import push
from workflow.scripts.settings import step


REPO = Path(__file__).resolve().parents[3]


def later(folder, repo_id: str) -> str:
    """The command that uploads `folder` once the Hub can be reached again, from any folder."""
    words = [".venv/bin/python", "-m", __spec__.name, str(Path(folder).resolve()), repo_id]
    return f"cd {shlex.quote(str(REPO))} && {shlex.join(words)}"


def upload(folder, repo_id: str) -> str:
    """push(), its failure one line that keeps the folder and names the command to retry."""
    if not Path(folder, "deploy.json").is_file():
        raise UserError(f"push: {folder} is not a finished deploy/ folder (no deploy.json); run the workflow")
    try:
        return push(folder, repo_id)
    except Exception as err:  # no route, a revoked token, a full quota: the Hub raises many kinds
        raise UserError(f"push: uploading {folder} to {repo_id} failed ({first_line(err)}); the model is kept: "
                        f"push it later with `{later(folder, repo_id)}`") from None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a deploy/ folder")
    parser.add_argument("repo", help="the Hub model repo (user/name)")
    parser.add_argument("--out", type=Path, help="pushed.json to write (the commit's URL)")
    args = parser.parse_args(argv)
    url = upload(args.folder, args.repo)
    if args.out:
        write_json(args.out, {"repo": args.repo, "commit_url": url})
    print(f"push: {args.folder} uploaded to {args.repo}: {url}", file=sys.stderr)


if __name__ == "__main__":
    step.entry(main)
