"""Run on each node by `setup_nodes`, with the node's system python3: fetch
the workflow copy from the launch node, write the files that differ, then
`make venv`; then the experiment's data (tokenized data and the fetched
model) at the same path, unless the node already sees the same files (a
shared filesystem, or an earlier set-up); print one report line.

It needs only the standard library and launch/ranks.py (also stdlib only):
the node has no copy of the workflow yet, so setup.py sends the source of
both as the program (`standalone_program`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import urllib.request

from workflow.scripts.launch import ranks  # inlined by standalone_program

MARKER = "CPUDDP-SETUP "


def write_if_changed(root: str, member: tarfile.TarInfo, content: bytes) -> bool:
    """Replace one file atomically, only when its content differs."""
    target = os.path.join(root, member.name)
    try:
        with open(target, "rb") as handle:
            if handle.read() == content:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".cpuddp-tmp", "wb") as handle:
        handle.write(content)
    os.chmod(target + ".cpuddp-tmp", member.mode)
    os.replace(target + ".cpuddp-tmp", target)
    return True


def unpack(data: bytes, root: str) -> int:
    """Files written from the archive."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return sum(write_if_changed(root, m, tar.extractfile(m).read()) for m in tar.getmembers())


def tree_digest(root: str, names=None) -> str:
    """sha256 over the relative paths and contents of the files under root
    (or of `names` only); the same files give the same digest on every node."""
    if names is None:
        names = [os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files]
    digest = hashlib.sha256()
    for name in sorted(names):
        digest.update(name.encode() + b"\0")
        with open(os.path.join(root, name), "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def copy_data(env) -> str | int | None:
    """The experiment's data at the launch node's path: None when not asked,
    "same" when this node sees the same files, else the files written."""
    root = env.get("CPUDDP_SETUP_DATA")
    if not root:
        return None
    if os.path.isdir(root) and tree_digest(root) == env["CPUDDP_SETUP_DATA_SHA256"]:
        return "same"
    names, written = [], 0
    with urllib.request.urlopen(env["CPUDDP_SETUP_URL"] + "/data", timeout=600) as stream, \
            tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if member.isfile():
                names.append(member.name)
                written += write_if_changed(root, member, tar.extractfile(member).read())
    if tree_digest(root, names) != env["CPUDDP_SETUP_DATA_SHA256"]:
        sys.exit(f"setup: the data copy in {root} arrived damaged")
    return written


def main() -> None:
    env = os.environ
    data = urllib.request.urlopen(env["CPUDDP_SETUP_URL"], timeout=120).read()
    if hashlib.sha256(data).hexdigest() != env["CPUDDP_SETUP_SHA256"]:
        sys.exit("setup: the workflow copy arrived damaged")
    written = unpack(data, env["CPUDDP_SETUP_ROOT"])
    make = subprocess.run(["make", "-C", env["CPUDDP_SETUP_ROOT"], "venv"], stdout=sys.stderr)
    report = {"rank": ranks.read().rank, "written": written, "make": make.returncode, "data": copy_data(env)}
    print(MARKER + json.dumps(report), flush=True)


def standalone_program() -> str:
    """This module's source with launch/ranks.py in place of its import,
    for `python3 -c` on a node that has no copy of the workflow."""
    import inspect

    own = inspect.getsource(sys.modules[__name__])
    inlined = inspect.getsource(ranks).replace("from __future__ import annotations\n", "")
    own = own.replace("from workflow.scripts.launch import ranks  # inlined by standalone_program\n",
                      "import types\nranks = types.SimpleNamespace(read=read)\n")
    head, _, body = own.partition("from __future__ import annotations\n")
    return "from __future__ import annotations\n" + inlined + body + "\nmain()\n"


if __name__ == "__main__":
    main()
