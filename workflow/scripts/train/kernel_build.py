"""Build cpuddp's C kernels (train/*.c) with the system C compiler on their
first use on a machine, cache them, load them with ctypes.

The build goes to $CPUDDP_KERNEL_CACHE or ~/.cache/cpuddp/kernels, in a
folder named by the sha256 of the source, the flags and the compiler's
`--version`, written under a temporary name and renamed into place. The
ranks of a node start at once: the first takes an flock on the folder's
`.lock` and builds, the others wait on it and load what it built (one
build per node, logged as a line in the folder's build.log). A kernel that cannot
be built gives a one-line reason, never an exception: training then takes
torch's path and the log says why.

The key is computable by anyone, and loading a library runs its
constructors: the cache and each kernel folder are created 0700, and a
library is built or loaded only where it and its folder belong to this user
and nobody else can write (private()); anything else is refused in one line.

With more than one torch thread a kernel's calls run in parallel. Built
with -fopenmp, each kernel has entry points that run them on OpenMP
threads; the loader gives the library the libgomp.so.1 torch already
loaded, so they are torch's own threads (shares_torchs_openmp checks that
one runtime is mapped). Python threads (run(): ctypes releases the GIL)
remain for a build without OpenMP or beside another runtime: they wait for
the core that a torch worker still spins on after torch's last parallel
op (libgomp's spin before it sleeps), which cost a 2-thread rank about
half its kernels' speed.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from workflow.scripts.common.private import private, private_folder

# -ffp-contract=off: no multiply and add fused by the compiler, so every
# target clone (and CPU) computes the same bits; -fno-math-errno lets sqrtf
# vectorise. No -march: target_clones picks the ISA at run time.
FLAGS = ("-O3", "-shared", "-fPIC", "-fno-math-errno", "-ffp-contract=off")
# A kernel's *_calls entry points run on OpenMP threads, torch's own where the
# runtime is the one torch loaded (shares_torchs_openmp); a compiler without
# OpenMP builds the kernel without it, and those calls then run one by one.
OPENMP = "-fopenmp"
CHUNK = 1 << 20  # elements per call: a multiple of the sum's 16 lanes


def fixed_isa_compiler(march: str, cc: str | None = None) -> str:
    """A compiler command ($CC, else cc) that builds a kernel for `march` alone
    (x86-64-v3: AVX2's code) instead of target_clones' run-time pick: the C
    files keep a CLONES or CLONES_FMA the command defines. The code an
    AVX2-only CPU runs, on any x86-64 CPU (tests/integration/test_kernel_isa.py,
    bench/isa.py); the command is part of the cache key."""
    return f"{cc or os.environ.get('CC') or 'cc'} -march={march} -DCLONES= -DCLONES_FMA="


def cache_root() -> Path:
    return Path(os.environ.get("CPUDDP_KERNEL_CACHE") or Path.home() / ".cache" / "cpuddp" / "kernels")


def refused(target: Path, why: str) -> str:
    return (f"{target.name} not built or loaded: {why}; remove it or set CPUDDP_KERNEL_CACHE to a folder of "
            "your own")


def cached_path(source: Path, command: list[str], root: Path) -> Path:
    """Where `source` built by `command` is cached under `root`."""
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60).stdout
    key = hashlib.sha256(source.read_bytes() + " ".join([*command, *FLAGS, OPENMP, version]).encode()).hexdigest()
    return root / key[:16] / source.with_suffix(".so").name


def compile_and_load(source: Path, cc: str | None = None, cache: Path | None = None) -> tuple[ctypes.CDLL | None, str]:
    """(the loaded library, its path) or (None, why not), built with
    compiler `cc` ($CC, else cc)."""
    command = shlex.split(cc or os.environ.get("CC") or "cc")
    if not command or shutil.which(command[0]) is None:
        return None, f"no C compiler ({' '.join(command) or 'CC is empty'} not found; set CC)"
    try:
        root = cache or cache_root()
        target = cached_path(source, command, root)
        folder = target.parent
        private_folder(root)  # only the key's folder and file are trusted, or not
        why = private_folder(folder)
        if why:
            return None, refused(target, why)
        with locked(folder):
            if not os.path.lexists(target):
                why = build_into(source, command, target)
                if why:
                    return None, why
        why = private(target)
        if why or not target.is_file():
            return None, refused(target, why or f"{target} is not a file")
        return ctypes.CDLL(str(target)), str(target)
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"{source.name} could not be built or loaded: {error}"


@contextlib.contextmanager
def locked(folder: Path):
    """An exclusive flock on `folder`/.lock (created 0600), held in the with block."""
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by close, also when the process dies
        yield
    finally:
        os.close(fd)


def build_into(source: Path, command: list[str], target: Path) -> str | None:
    """Compile `source` to `target` (under a temporary name, renamed into
    place) and log it in build.log beside it; None, or why it failed."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".build-", suffix=".so")
    os.close(handle)
    for openmp in ([OPENMP], []):
        done = subprocess.run([*command, *FLAGS, *openmp, "-o", temporary, str(source), "-lm"], capture_output=True,
                              text=True, timeout=300)
        if not done.returncode:
            break
    if done.returncode:
        os.unlink(temporary)
        lines = done.stderr.strip().splitlines() or ["no output"]
        first = next((line for line in lines if "error" in line), lines[-1])
        return f"{' '.join(command)} could not build {source.name}: {first}"
    os.chmod(temporary, 0o700)  # owner-only whatever the umask: code this user loads (common/private.py)
    os.replace(temporary, target)
    log = os.open(target.parent / "build.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with os.fdopen(log, "a") as out:
        out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} built {target.name} from {source}\n")
    return None


def build_checked(source: Path, wrap, sound, refusal: str, cc: str | None = None,
                  cache: Path | None = None) -> tuple:
    """(wrap(library), its path), or (None, why not): built by
    compile_and_load, refused with "<path> <refusal>" unless the wrapper's
    `sound(kernel)` says the build computes what it defines."""
    lib, where = compile_and_load(source, cc, cache)
    if lib is None:
        return None, where
    kernel = wrap(lib)
    if not sound(kernel):
        return None, f"{where} {refusal}"
    return kernel, where

_LOADED: dict[tuple, tuple] = {}


def once(source: Path, build) -> tuple:
    """build() of `source`'s kernel once per process for this $CC and cache folder."""
    key = (source, os.environ.get("CC"), os.environ.get("CPUDDP_KERNEL_CACHE"))
    if key not in _LOADED:
        _LOADED[key] = build()
    return _LOADED[key]


def openmp_runtimes() -> set[str]:
    """The OpenMP runtime libraries mapped into this process (libgomp, libiomp5, libomp); none where
    /proc/self/maps cannot be read."""
    try:
        with open("/proc/self/maps") as maps:
            return {line.split()[-1] for line in maps if re.search(r"/lib(gomp|iomp5|omp)[-.][^/]*$", line.strip())}
    except OSError:
        return set()


def links_openmp(lib: ctypes.CDLL) -> bool:
    """Whether `lib` was built with OpenMP: a lookup through its handle searches the library and its
    own dependencies only, so it finds the runtime's omp_get_max_threads where -fopenmp linked one."""
    return hasattr(lib, "omp_get_max_threads")


def shares_torchs_openmp(lib: ctypes.CDLL) -> bool:
    """Whether `lib` was built with OpenMP and runs on the one runtime in the process, torch's: a
    second runtime (torch on Intel's, say) would start threads of its own beside torch's."""
    return links_openmp(lib) and len(openmp_runtimes()) == 1


def openmp_threads(openmp: bool, calls: int) -> int:
    """Threads for a kernel's `calls` calls on OpenMP (`openmp`: its build shares torch's runtime):
    torch's thread count where there is parallel work, else 0 (they then go through run())."""
    threads = torch.get_num_threads()
    return threads if openmp and threads > 1 and calls > 1 else 0


@functools.cache
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cpuddp-kernel")


def run(calls: list) -> list:
    """Every call's result, in order, for calls (function, arguments,
    elements, the tensors it reads and writes, held until it is done): on
    torch's thread count of Python threads (ctypes releases the GIL in a
    call), in jobs of consecutive calls of about CHUNK elements, or in this
    thread."""
    workers = torch.get_num_threads()
    if workers == 1 or len(calls) < 2:
        return [function(*args) for function, args, *_ in calls]
    jobs, job, size = [], [], 0
    for call in calls:
        job.append(call)
        size += call[2]
        if size >= CHUNK:
            jobs.append(job)
            job, size = [], 0
    jobs += [job] if job else []
    done = _pool(workers).map(lambda job: [function(*args) for function, args, *_ in job], jobs)
    return [result for results in done for result in results]
