"""A workflow run's Snakemake process, forked from the forkserver of
forked_ranks, which has snakemake.cli, torch and transformers imported
(our Snakefile's modules import the last two). A dry run of
experiments/demo.yaml costs 0.30 CPU-s forked against 1.45 exec'd; with
snakemake.cli alone preloaded, 1.39: the imports are mostly torch's and
transformers' (2026-12-04, AMD EPYC Zen 5). It is a real process still,
as `snakemake` on the command line starts one: its own environment, working directory, stdin, stdout and
stderr, the same argv through snakemake.cli.main, its steps and ranks
its own child processes, its exit status the command's. Python's atexit
hooks do not run in it; no hook of the local profile's run needs them
(the Slurm plugin's log clean-up does: Slurm runs keep their own
processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from helpers import forked_ranks


def _main(argv: list[str], env: dict, cwd: str, out: str, err: str, umask: int | None) -> None:
    os.chdir(cwd)
    if umask is not None:  # as a shell's `umask 022; snakemake ...`
        os.umask(umask)
    os.environ.clear()
    os.environ.update(env)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = list(argv)
    import snakemake.cli

    snakemake.cli.main(argv[1:])  # sys.exit(0 or 1): the process's exit status


def run(argv: list[str], env: dict, timeout: float, umask: int | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True, env=env,
    timeout=timeout) for a `snakemake` argv, the process forked (under
    `umask`, else the forkserver's)."""
    with tempfile.TemporaryDirectory(prefix="snakemake-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        for path in (out, err):
            open(path, "w").close()
        process = forked_ranks.context().Process(target=_main, args=(argv, env, os.getcwd(), out, err, umask))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(argv, timeout, _read(out), _read(err))
        return subprocess.CompletedProcess(argv, process.exitcode, _read(out), _read(err))


def _read(path: str) -> str:
    with open(path, errors="replace") as text:
        return text.read()
