"""Build oneCCL Bindings for PyTorch (oneccl_bind_pt) from source into a venv.

    python envs/torch-ccl/build.py --venv VENV --source torch-ccl-1fc0c38.tar.gz \
        --sha256 425b8db6... [--fallback OTHER.tar.gz] [--check-only]

Intel publishes no oneccl_bind_pt for torch 2.8, but its last source
(intel/torch-ccl 1fc0c38) builds against oneCCL from PyPI (`oneccl`,
`oneccl-devel`, with USE_SYSTEM_ONECCL=ON) and the venv's torch. The venv
must already hold envs/requirements-intel.txt. Steps, each stopping with one
line on failure: the source's sha256 is checked; the source is extracted
fresh into VENV/build/torch-ccl; version.patch is applied; the wheel is
built (no-cuda-toolkit.cmake only when torch is a CUDA build) and installed
into VENV, next to oneCCL (the library finds libccl through an
$ORIGIN-relative RPATH); the result must import. Versions, commit, hashes and
build time go to VENV/ccl-build.json and into the installed package
(cpuddp-build.json), where cpuddp's environment check reads them.
Only the standard library is used here: any python can run it.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATCH = HERE / "version.patch"
CMAKE_INCLUDE = HERE / "no-cuda-toolkit.cmake"
RECORD = "ccl-build.json"
PACKAGE_RECORD = "cpuddp-build.json"
TOOLS = ("cmake", "make", "cc", "c++", "patch")


class BuildError(Exception):
    """One line: what is wrong and what to do."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_source(candidates: list[str], expected: str) -> Path:
    """The first existing candidate, whose sha256 must be `expected`."""
    found = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
    if found is None:
        raise BuildError(f"torch-ccl source not found (looked for {', '.join(c for c in candidates if c)}): "
                         "copy torch-ccl-1fc0c38.tar.gz there or pass CCL_SRC=/path/to/it (README, Intel stack)")
    actual = sha256(found)
    if actual != expected:
        raise BuildError(f"torch-ccl source {found} has sha256 {actual}, expected {expected}: the file is altered "
                         "or another version; restore the original (sha256 in ../shared/vendor/README.md)")
    return found.resolve()


def check_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise BuildError(f"building the oneCCL bindings needs {', '.join(missing)} on PATH: install them "
                         "(Debian: apt-get install cmake make g++ patch)")


def run(argv: list, cwd: Path, env: dict, log: Path, what: str) -> str:
    """Run a build command, its output appended to `log`; one line if it fails."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(map(str, argv))}\n")
        out.flush()
        done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        raise BuildError(f"{what} failed (exit {done.returncode}; last line: {tail[0] if tail else '-'}): "
                         f"see {log}")
    return log.read_text(errors="replace")


def python_says(python: Path, code: str) -> str:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise BuildError(f"{python} cannot run `{code}` ({last}): build the Intel env first (make intel-venv)")
    return done.stdout.strip()


def extract(source: Path, build: Path) -> Path:
    """A fresh copy of the source in build/ (nothing left from an earlier try)."""
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    with tarfile.open(source) as archive:
        archive.extractall(build, filter="data")
    (tree,) = [p for p in build.iterdir() if p.is_dir()]
    return tree


def build_env(venv: Path, cuda: bool) -> dict:
    """What the build needs besides the venv: oneCCL and Intel MPI are the venv's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CMAKE_", "USE_", "BUILD_"))}
    env.update({
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "USE_SYSTEM_ONECCL": "ON",  # the vendored source has no third_party/oneCCL
        "COMPUTE_BACKEND": "",  # CPU
        "CCL_ROOT": str(venv),
        # impi-devel's mpicc keeps an unsubstituted install prefix; it reads this instead.
        "I_MPI_ROOT": str(venv),
        "MAX_JOBS": str(os.cpu_count() or 1),
    })
    if cuda:
        env["CMAKE_PROJECT_INCLUDE"] = str(CMAKE_INCLUDE)
    return env


def build_wheel(venv: Path, tree: Path, log: Path) -> tuple[Path, bool]:
    """The oneccl_bind_pt wheel built from `tree`; and whether torch is a CUDA build."""
    python = venv / "bin" / "python"
    cuda = python_says(python, "import torch; print(torch.version.cuda or '')") != ""
    run(["patch", "-p1", "--forward", "--batch", "-i", PATCH], tree, dict(os.environ), log, "applying version.patch")
    dist = tree / "dist"
    run([python, "-m", "pip", "wheel", ".", "--no-build-isolation", "--no-deps", "-w", dist],
        tree, build_env(venv, cuda), log, "building the oneccl_bind_pt wheel")
    (wheel,) = dist.glob("oneccl_bind_pt-*.whl")
    return wheel, cuda


def installed_record(venv: Path, python: Path) -> dict:
    """Versions and library hashes of what is now installed in the venv."""
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "('torch', 'oneccl_bind_pt', 'oneccl', 'oneccl-devel', 'impi-rt', 'impi-devel')}))")
    versions = json.loads(python_says(python, code))
    package = Path(python_says(python, "import importlib.util as u; "
                                       "print(u.find_spec('oneccl_bindings_for_pytorch').submodule_search_locations[0])"))
    libraries = {p.name: sha256(p) for p in sorted(package.glob("lib/*.so")) + sorted(package.glob("_C*.so"))}
    return {"versions": versions, "package_dir": str(package), "libraries_sha256": libraries}


def tool_version(tool: str) -> str:
    done = subprocess.run([tool, "--version"], capture_output=True, text=True)
    return (done.stdout.splitlines() or ["?"])[0]


def build(args) -> dict:
    check_tools()
    source = find_source([args.source, args.fallback], args.sha256)
    if args.check_only:
        return {"source": str(source)}
    venv, started = Path(args.venv).resolve(), time.time()
    log = venv / "build" / "torch-ccl.log"
    tree = extract(source, venv / "build" / "torch-ccl")
    log.write_text(f"source {source} (sha256 {args.sha256})\n")
    wheel, cuda = build_wheel(venv, tree, log)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--no-deps", "--force-reinstall", wheel], tree, dict(os.environ), log,
        "installing the oneccl_bind_pt wheel")
    run([python, "-c", "import torch, intel_extension_for_pytorch, oneccl_bindings_for_pytorch"],
        venv, dict(os.environ), log, "importing the built oneccl_bindings_for_pytorch")
    record = {
        "source": str(source), "source_sha256": args.sha256, "commit": args.commit,
        "wheel": wheel.name, "wheel_sha256": sha256(wheel), "torch_cuda_build": cuda,
        "cmake_project_include": str(CMAKE_INCLUDE) if cuda else None,
        "compiler": tool_version("c++"), "cmake": tool_version("cmake"),
        "built_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "build_seconds": round(time.time() - started, 1), **installed_record(venv, python),
    }
    text = json.dumps(record, indent=2) + "\n"
    (Path(record["package_dir"]) / PACKAGE_RECORD).write_text(text)
    (venv / RECORD).write_text(text)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", required=True, help="the Intel env (torch 2.8 and oneccl already installed)")
    parser.add_argument("--source", required=True, help="torch-ccl source tarball")
    parser.add_argument("--fallback", default="", help="where else to look for it")
    parser.add_argument("--sha256", required=True, help="the tarball's expected sha256")
    parser.add_argument("--commit", default="", help="the source's commit, for the record")
    parser.add_argument("--check-only", action="store_true", help="only find the source and check its sha256")
    args = parser.parse_args(argv)
    try:
        record = build(args)
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.check_only:
        print(f"torch-ccl source {record['source']}: sha256 ok")
    else:
        print(f"built {record['wheel']} in {record['build_seconds']} s into {args.venv} "
              f"(record: {Path(args.venv) / RECORD})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
