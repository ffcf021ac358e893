"""Training checkpoints: atomic, marker written last, newest valid one wins.

Rank 0 writes everything (the model and optimizer are identical on every
rank under DDP; the RNG states of all ranks are gathered to it), so nodes
need no shared filesystem. A checkpoint folder is valid only once its
COMPLETE marker exists; it is written last, every file and the folder are
fsynced, then the folder is renamed from its temporary name (one of this
host and process: two tries never share one) and the checkpoints folder is
fsynced. The marker keeps the fingerprint's parts (train/fingerprint.py): a
checkpoint of other work is never resumed, and one line says what changed
and where it was moved aside (common/superseded.py: never deleted).
Loading uses torch.load(weights_only=True).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

from workflow.scripts.common.atomic import fsync_dir, space_for
from workflow.scripts.common.errors import UserError
from workflow.scripts.common import superseded
from workflow.scripts.train.fingerprint import change, changed_part

MARKER = "COMPLETE"
PREFIX = "step-"
FILES = ("model.pt", "state.pt")
STALE_ELSEWHERE_SECONDS = 3600  # a temporary folder of another host's try, untouched this long, is dead


def _folder(root: Path, step: int) -> Path:
    return root / f"{PREFIX}{step:08d}"


def rng_state() -> dict:
    """This rank's RNG state (dropout draws); the data order is seeded per epoch."""
    return {"torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])


def save(root, step: int, state: dict, meta: dict, keep: int, best_step: int | None = None) -> Path:
    """Write checkpoint `step` atomically and keep only the newest `keep`
    and the best one (`best_step`, train.best_model; its marker says
    "is_best": true while it is). `state`: model, optimizer, scheduler and rng
    (every rank's) state; `meta`: the loop's position and the settings'
    fingerprint. The marker holds each file's sha256, so a damaged file is
    never trusted."""
    root = Path(root)
    final = _folder(root, step)
    tmp = root / f".{final.name}.{socket.gethostname()}.{os.getpid()}.tmp"  # this process's own
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with space_for(final, state_bytes(state)):
            _write(tmp, state, {**meta, "step": step, "is_best": step == best_step})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    fsync_dir(root)  # the rename itself survives a crash
    prune(root, keep, best_step)
    return final


def clean_stale(root) -> list[Path]:
    """Remove the temporary folders of dead tries: on this host those of a
    process that is gone, of another host those untouched for an hour."""
    host, removed = socket.gethostname(), []
    for tmp in Path(root).glob(f".{PREFIX}*.tmp") if Path(root).is_dir() else []:
        owner = tmp.name[:-len(".tmp")].split(".")[2:]  # [host..., pid]; hosts may hold dots
        owner_host, pid = ".".join(owner[:-1]), owner[-1] if owner else ""
        if owner_host == host and pid.isdigit():
            dead = int(pid) != os.getpid() and not _alive(int(pid))
        else:  # another host's, or of an older cpuddp (no owner in the name)
            dead = time.time() - tmp.stat().st_mtime > STALE_ELSEWHERE_SECONDS or not owner_host
        if dead:
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write(tmp: Path, state: dict, meta: dict) -> None:
    try:
        torch.save(state["model"], tmp / "model.pt")
        torch.save({k: v for k, v in state.items() if k != "model"}, tmp / "state.pt")
    except RuntimeError as err:
        # torch's writer reports a full disk as a RuntimeError of its stream
        # ("iostream error", "unexpected pos"): told apart by the space left.
        if shutil.disk_usage(tmp).free < state_bytes(state):
            raise OSError(errno.ENOSPC, str(err)) from None
        raise
    files = {name: sha256(tmp / name) for name in FILES}
    (tmp / MARKER).write_text(json.dumps({**meta, "files": files}))
    _fsync_files(tmp)
    fsync_dir(tmp)


def state_bytes(state) -> int:
    """Roughly what torch.save writes for `state` (its tensors)."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_files(path: Path) -> None:
    for item in path.iterdir():
        with open(item, "rb") as handle:
            os.fsync(handle.fileno())


def valid(root) -> list[Path]:
    """Valid checkpoints, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob(f"{PREFIX}*") if (p / MARKER).is_file())


def prune(root, keep: int, best_step: int | None = None) -> None:
    """Remove all but the newest `keep` checkpoints and the best one."""
    best = None if best_step is None else _folder(Path(root), best_step).name
    for old in valid(root)[:-keep]:
        if old.name != best:
            shutil.rmtree(old, ignore_errors=True)


def damage(folder: Path, meta: dict) -> str | None:
    """Why a checkpoint of the same work must not be used, or None."""
    for name, digest in meta.get("files", {}).items():
        if not (folder / name).is_file():
            return f"{name} is missing"
        if sha256(folder / name) != digest:
            return f"{name} is damaged (sha256 differs from the marker's)"
    return None


def newest(root, fingerprint, log=None, set_aside=False) -> tuple[Path, dict] | None:
    """The newest checkpoint of the same work (fingerprint) that is whole, and
    its state. Every damaged one passed over is named in the log; those of
    other work in one line, which names the newest and what changed. With
    `set_aside` they are moved to the run's superseded/ (never deleted: the
    training stays the user's), so a fresh start's checkpoints are never
    pruned in favour of them."""
    other, found = [], None
    for folder in reversed(valid(root)):
        try:
            meta = info(folder)
        except (OSError, ValueError):
            meta, reason = None, "its marker is unreadable"
        changed = meta is not None and change(meta.get("fingerprint"), fingerprint)
        if changed:
            other.append((folder, changed, changed_part(meta.get("fingerprint"), fingerprint)))
            continue
        reason = damage(folder, meta) if meta is not None else reason
        if reason is None:
            try:
                found = folder, read(folder)
                break
            except Exception as err:  # a file torch cannot read
                reason = f"it cannot be read ({type(err).__name__}: {str(err).splitlines()[0][:120]})"
        if log:
            log.warning(f"skipping checkpoint {folder}: {reason}; trying the next older one")
    kept = None
    if other and set_aside:  # first: a refusal (no space) leaves everything where it was
        kept = superseded.set_aside([(f, part) for f, _, part in other], Path(root).parent)
    if other and log:
        log.warning(other_work_line(other, found, kept, Path(root).parent))
    return found


def other_work_line(other: list, found, kept: Path | None, run_dir: Path) -> str:
    """One line: the newest checkpoint of other work, what changed, what
    happens instead, and where it was moved (with the command that deletes it)."""
    folder, changed, _ = other[0]
    then = f"resuming from {found[0].name} instead" if found else "starting fresh"
    if kept is None:
        return f"checkpoint {folder.name} was trained {changed}: {then}"
    more = f" with {len(other) - 1} more of that work" if len(other) > 1 else ""
    return (f"checkpoint {folder.name} was trained {changed}: {then}; it{more} is kept in {kept} "
            f"(`{superseded.delete_command(run_dir)}` deletes what the run keeps aside)")


def info(folder) -> dict:
    return json.loads((Path(folder) / MARKER).read_text())


def read(folder) -> dict:
    """model, optimizer, scheduler and rng (every rank's) state, and meta."""
    folder = Path(folder)
    state = torch.load(folder / "state.pt", weights_only=True)
    state["model"] = torch.load(folder / "model.pt", weights_only=True)
    state["meta"] = info(folder)
    return state


class Checkpointer:
    """The checkpoints of one training, in the manner of torchtitan's
    CheckpointManager: where they go, which settings they belong to, how
    many are kept, and which rank writes. Every rank calls save and resume
    (they are collectives); rank 0 alone touches the disk, so nodes need no
    shared filesystem."""

    def __init__(self, root, fingerprint: dict | None, keep: int, rank: int, world_size: int, log):
        """`fingerprint`: train/fingerprint.py's parts (rank 0's; other ranks may pass None)."""
        self.root, self.fingerprint, self.keep = Path(root), fingerprint, keep
        self.rank, self.world_size, self.log = rank, world_size, log
        self.saved_step: int | None = None  # the step of the newest checkpoint written or resumed (every rank)
        self.keep_best = False  # train.best_model: the best evaluated checkpoint is never pruned

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def save(self, state, progress) -> None:
        """All ranks give their RNG state; rank 0 writes `state` (its
        state_dict) at `progress`'s step."""
        states = [None] * self.world_size
        dist.all_gather_object(states, rng_state())
        if self.is_main:
            best = progress.best["step"] if self.keep_best and progress.best else None
            folder = save(self.root, progress.step, {**state.state_dict(), "rng": states},
                          {"fingerprint": self.fingerprint, **progress.state_dict()}, self.keep, best)
            self.log.info(f"checkpoint {folder}")
        dist.barrier()
        self.saved_step = progress.step

    def save_final(self, state, progress) -> None:
        """A checkpoint at the last step, unless there is one (a collective):
        a failure while the model is saved then costs no training."""
        if self.saved_step != progress.step:
            self.save(state, progress)

    def resume(self, state, progress) -> None:
        """Continue from the newest whole checkpoint of the same settings, if any."""
        if self.is_main:
            for tmp in clean_stale(self.root):
                self.log.info(f"removed {tmp}: the temporary folder of a try that is gone")
        payload = [newest(self.root, self.fingerprint, self.log, set_aside=True) if self.is_main else None]
        dist.broadcast_object_list(payload)  # rank 0's disk decides
        if payload[0] is None:
            return
        folder, saved = payload[0]
        state.load_state_dict(saved)
        rng = saved["rng"]
        # On fewer ranks than wrote it (a node dropped), each rank takes its
        # own old rank's state; the data order does not depend on it.
        set_rng_state(rng[self.rank % len(rng)])
        progress.load_state_dict(saved["meta"])
        self.saved_step = progress.step
        self.log.info(f"resumed from {folder} (step {progress.step})")

    def load_best(self, state, step: int) -> None:
        """Rank 0: the state of the best checkpoint (train.best_model), to save as the model."""
        folder = _folder(self.root, step)
        reason = damage(folder, info(folder)) if (folder / MARKER).is_file() else "it is missing"
        if reason:
            raise UserError(f"the best checkpoint {folder} cannot be used: {reason}; rerun the training "
                            "(train.best_model needs its checkpoints folder kept)")
        state.load_state_dict(read(folder))
        self.log.info(f"the model is the best evaluated one: {folder.name}")

    def clear(self) -> None:
        """Once the model is in place only a failed run needs them (rank 0)."""
        if self.is_main:
            shutil.rmtree(self.root, ignore_errors=True)
