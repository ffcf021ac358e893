"""Run on each node by `setup_nodes`, with the node's system python3: fetch
the workflow copy from the launch node, write the files that differ, then
`make venv`; then the experiment's data (tokenized data and the fetched
model) at the same path, unless the node already sees the same files (a
shared filesystem, or an earlier set-up); print one report line.

It needs only the standard library and launch/ranks.py (also stdlib only):
the node has no copy of the workflow yet, so setup.py sends the source of
both as the program (`standalone_program`).

Nothing unchecked is placed: the workflow archive's sha256 is checked
before it is unpacked; the data arrives in a private folder beside its
place, and only once its digest matches are its files moved into place.
Every member must be a plain file (or folder) whose name stays inside the
target folder (tarfile's `data` filter where Python has it, and a check of
our own); anything else stops the set-up with one line.
"""

from __future__ import annotations

import filecmp
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request

from workflow.scripts.launch import ranks  # inlined by standalone_program

MARKER = "CPUDDP-SETUP "


def inside(root: str, member: tarfile.TarInfo) -> str:
    """Where `member` goes under `root`; exits with one line for a member
    that is not a plain file or folder, or whose name leads outside `root`
    (absolute, `..`, or through a link already there)."""
    if hasattr(tarfile, "data_filter"):  # Python 3.11.4+ (and 3.8.17+, 3.9.17+, 3.10.12+)
        try:
            tarfile.data_filter(member, root)
        except tarfile.FilterError as error:
            sys.exit(f"setup: archive member {member.name!r} refused: {error}")
    target = os.path.join(root, member.name)
    base, real = os.path.realpath(root), os.path.realpath(target)
    if not (member.isfile() or member.isdir()) or os.path.isabs(member.name) \
            or ".." in member.name.replace("\\", "/").split("/") or os.path.commonpath([base, real]) != base:
        sys.exit(f"setup: archive member {member.name!r} refused: not a plain file or folder inside {root}")
    return target


def write_if_changed(root: str, member: tarfile.TarInfo, content: bytes) -> bool:
    """Replace one file atomically, only when its content differs."""
    target = inside(root, member)
    try:
        with open(target, "rb") as handle:
            if handle.read() == content:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".cpuddp-tmp", "wb") as handle:
        handle.write(content)
    os.chmod(target + ".cpuddp-tmp", member.mode & 0o755)
    os.replace(target + ".cpuddp-tmp", target)
    return True


def unpack(data: bytes, root: str) -> int:
    """Files written from the archive."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        for member in members:  # every name, before any file is written
            inside(root, member)
        return sum(write_if_changed(root, m, tar.extractfile(m).read()) for m in members if m.isfile())


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
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".cpuddp-setup-", dir=parent)  # 0700, on the same filesystem
    try:
        with urllib.request.urlopen(env["CPUDDP_SETUP_URL"] + "/data", timeout=600) as stream:
            names = receive(stream, staging, root)
        if tree_digest(staging, names) != env["CPUDDP_SETUP_DATA_SHA256"]:
            sys.exit(f"setup: the data copy for {root} arrived damaged; nothing was placed")
        return sum(place(staging, root, name) for name in names)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def receive(stream, staging: str, root: str) -> list[str]:
    """The plain files of a tar stream, written under `staging`; every name
    checked against `root` (where they go) as well."""
    names = []
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            inside(root, member)
            target = inside(staging, member)
            if not member.isfile():
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(member) as source, open(target, "wb") as handle:
                shutil.copyfileobj(source, handle, 1 << 20)
            os.chmod(target, member.mode & 0o755)
            names.append(member.name)
    return names


def place(staging: str, root: str, name: str) -> bool:
    """Move one checked file into place, only when its content differs."""
    source, target = os.path.join(staging, name), os.path.join(root, name)
    if os.path.isfile(target) and filecmp.cmp(source, target, shallow=False):
        return False
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(source, target)
    return True


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
    import gc

    gc.enable()  # as program_loaded() would (workflow/scripts/__init__.py): this file also runs alone, on bare nodes
    main()
