"""A test's own ranks, started as torch.multiprocessing.spawn starts them,
but forked from multiprocessing's forkserver with torch, torch.distributed
and transformers' BERT loaded once (and snakemake.cli, for the workflow
runs of forked_snakemake: one server a test worker). A spawned rank
imports them afresh, 2-4 CPU-s of its few seconds; the forkserver is a clean process that has
only imported them (no OpenMP region has run in it), so forking it is safe,
where forking the test worker itself is not. The ranks are real processes
still: their own gloo groups, shared memory and exits."""

from __future__ import annotations

import multiprocessing

import torch.multiprocessing as mp

PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "transformers",
           "transformers.models.bert.modeling_bert", "workflow.scripts.train.comm", "snakemake.cli"]


def context():
    """The forkserver context (its server started with PRELOAD at its first use)."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    return mp.get_context("forkserver")


def spawn(fn, args: tuple = (), nprocs: int = 1) -> None:
    """mp.spawn(fn, args, nprocs, join=True), the ranks forked from the forkserver."""
    context()
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")
