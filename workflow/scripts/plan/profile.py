"""One node's training step, measured for the scaling plan: forward,
backward and update times of one rank, when each gradient is ready during
backward and how many bytes it has, and what gradient compression costs.

    python -m workflow.scripts.plan.profile --config C [--environment E] --out profile.json [--steps 6]

C is the plan's configuration slice or an experiment file. The model is
built from its configuration only (random weights: the time does not depend
on them), so a Hub model's shape needs no download when it is one of
SHAPES, then as training builds it (train/state.py): through
train.model_code (cpuddp's own encoder where auto picks it, else
transformers' model), train.lora and the train.speed levers, with the IPEX
and levers the run's environment.json records, or as the environment check
would decide them. Batches are random tokens of the experiment's per-rank batch size
and `plan.seq_len` (default train.max_seq_length), under DDP on a one-rank
gloo group, with the optimizer that training uses.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from workflow.scripts.settings import config as cfg
from workflow.scripts.common import tasks
from workflow.scripts.settings import step
from workflow.scripts.probes import hardware
from workflow.scripts.settings import layout, profiles
from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.views import PlanView
from workflow.scripts.nodes import describe
from workflow.scripts.plan import compress_cost
from workflow.scripts.probes import intel
from workflow.scripts.settings import levers
from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.common.modeling import takes_packed
from workflow.scripts.data.batching import packed_from_padded
from workflow.scripts.train import lora, master, model_code, speed


def shapes() -> dict:
    """Hub models whose configuration is the transformers default of a class."""
    from transformers import BertConfig, DistilBertConfig

    return {"distilbert-base-uncased": DistilBertConfig, "bert-base-uncased": BertConfig,
            "bert-base-cased": lambda **kw: BertConfig(vocab_size=28996, **kw)}


def model_config(model: str):
    """The model's configuration: a known shape, a local folder, or the Hub."""
    from transformers import AutoConfig

    if model in shapes():
        return shapes()[model]()
    try:
        return AutoConfig.from_pretrained(cfg.resolve_model(model))
    except OSError as err:
        raise UserError(f"cannot read the configuration of model '{model}' ({str(err).splitlines()[0]}); "
                        f"point model: at a local folder or use one of: {' '.join(shapes())}") from None


def build_model(model: str, task_name: str):
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

    task = tasks.get_task(task_name)
    config = model_config(model)
    torch.manual_seed(0)
    if task.is_qa:
        return AutoModelForQuestionAnswering.from_config(config)
    config.num_labels = 1 if task.is_regression else len(task.label_names)
    return AutoModelForSequenceClassification.from_config(config)


def random_batch(model, batch_size: int, seq_len: int, qa: bool) -> dict:
    generator = torch.Generator().manual_seed(0)
    vocab = model.get_input_embeddings().num_embeddings
    batch = {"input_ids": torch.randint(1000, vocab, (batch_size, seq_len), generator=generator),
             "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long)}
    if qa:
        batch["start_positions"] = torch.zeros(batch_size, dtype=torch.long)
        batch["end_positions"] = torch.ones(batch_size, dtype=torch.long)
    else:
        batch["labels"] = torch.zeros(batch_size, dtype=torch.long) if model.config.num_labels > 1 else \
            torch.zeros(batch_size)
    return batch


class ReadyTimes:
    """When each parameter's gradient is complete during backward."""

    def __init__(self, model):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.when = {}
        self.start = 0.0
        for index, param in enumerate(self.params):
            param.register_post_accumulate_grad_hook(lambda p, i=index: self.when.__setitem__(i, time.perf_counter()))

    def begin(self) -> None:
        self.when, self.start = {}, time.perf_counter()

    def offsets(self) -> dict[int, float]:
        return {i: t - self.start for i, t in self.when.items()}


def one_step(ddp, optimizer, batch, ready: ReadyTimes, autocast) -> tuple[float, float, float, dict]:
    """(forward, backward, update) seconds and the gradients' ready offsets."""
    start = time.perf_counter()
    with autocast():
        loss = ddp(**batch).loss
    forward_end = time.perf_counter()
    ready.begin()
    loss.backward()
    backward_end = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return forward_end - start, backward_end - forward_end, time.perf_counter() - backward_end, ready.offsets()


def wait_for_parties(barrier: str | None, parties: int) -> None:
    """Start together with `parties` profiles (measuring under contention:
    several ranks sharing a node's cores), or at once without a barrier."""
    if not barrier:
        return
    folder = Path(barrier)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(os.getpid())).touch()
    deadline = time.time() + 600
    while len(list(folder.iterdir())) < parties:
        if time.time() > deadline:
            raise UserError(f"profile: only {len(list(folder.iterdir()))} of {parties} profiles reached {barrier}")
        time.sleep(0.05)


def measure(model, batch: dict, steps: int, warmup: int, precision: str, barrier=None, parties: int = 1) -> dict:
    """Median times over `steps` steps after `warmup`, on a one-rank group."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        optimizer, autocast = master.step_parts(model, precision)
        ddp = DDP(model, gradient_as_bucket_view=True)
        ready = ReadyTimes(model)
        wait_for_parties(barrier, parties)
        runs = [one_step(ddp, optimizer, batch, ready, autocast) for _ in range(warmup + steps)]
        del ddp
    finally:
        dist.destroy_process_group()
    runs = runs[warmup:]
    offsets = {i: statistics.median(r[3][i] for r in runs) for i in runs[0][3]}
    # bf16_master's gradients are bf16: the all-reduce sends half the bytes.
    sizes = {i: ready.params[i].numel() * ready.params[i].element_size() for i in offsets}
    grads = sorted(([sizes[i], round(t, 6)] for i, t in offsets.items()), key=lambda g: g[1])
    return {"forward": statistics.median(r[0] for r in runs), "backward": statistics.median(r[1] for r in runs),
            "update": statistics.median(r[2] for r in runs), "grads": grads}


def decisions(config: PlanView, environment: str | None) -> tuple[str, int, int]:
    """(precision, threads, ranks per node) as the run's environment check
    decided, or decided here (processes_per_node auto: 1 rank, or cores / threads)."""
    if environment:
        info = read_json(environment)
        return info["precision"], int(info["threads_per_process"]), int(info["processes_per_node"])
    cpu = hardware.cpu_summary()
    dist_cfg = config.distributed
    precision = describe.choose_precision(config.train.precision, cpu["isa_flags"])[0]
    ranks = layout.ranks_guess(dist_cfg, hardware.usable_cores(cpu))
    threads = describe.threads_per_process(dist_cfg.threads_per_process, ranks, cpu)
    return precision, min(threads, hardware.usable_cores(cpu)), ranks  # an experiment written for bigger nodes


def model_choices(config: PlanView, environment: str | None) -> tuple[bool, levers.Levers]:
    """(IPEX, the train.speed levers) as the run's environment check decided
    them, or decided here as it decides them (IPEX by what is installed: not
    imported here, as a mismatched IPEX ends the process that imports it)."""
    if environment:
        decided = RunDecisions.of(read_json(environment))
        return decided.ipex, decided.levers
    train, dist_cfg = config.train, config.distributed
    ipex = train.ipex is True or (train.ipex == "auto" and intel.installed_versions()[intel.IPEX_MODULE] is not None)
    return ipex, levers.choose(train.speed, levers.Context(dist_cfg.nodes, dist_cfg.gradient_compression))[0]


def load(path: str, profile: str | None = None) -> PlanView:
    """The plan's configuration slice (JSON) or an experiment file (validated,
    under `profile`'s cluster file when given)."""
    if path.endswith((".yaml", ".yml")):
        return PlanView.pick(profiles.experiment_config(path, profile))
    return PlanView.pick(read_json(path))  # the plan slice, or a run's whole configuration


def profile(config: PlanView, environment: str | None, steps: int, warmup: int, barrier=None, parties=1) -> dict:
    precision, threads, ranks = decisions(config, environment)
    torch.set_num_threads(threads)
    train = config.train
    seq_len = config.plan.seq_len or train.max_seq_length
    is_qa = tasks.get_task(config.task).is_qa
    ipex, chosen = model_choices(config, environment)
    model, choice = model_code.build(train.model_code, build_model(config.model, config.task), is_qa, ipex, chosen,
                                     lora=train.lora is not None,
                                     trust_remote_code=config.trust_remote_code)  # the model code training takes
    model = lora.apply(model, train.lora)[0]  # only the adapters' gradients
    speed.apply(model, chosen, speed.Parts(precision=precision))
    batch = random_batch(model, train.batch_size, seq_len, is_qa)
    if takes_packed(model):  # cpuddp's encoder, as its loader gives it: packed real tokens
        batch = packed_from_padded(batch)
    times = measure(model, batch, steps, warmup, precision, barrier, parties)
    costs = compress_cost.measure(model)
    return {"model": config.model, "model_code": choice.code, "parameters": sum(p.numel() for p in model.parameters()),
            "batch_size": train.batch_size, "seq_len": seq_len, "precision": precision, "threads": threads,
            "processes_per_node": ranks,
            "log_every": train.log_every, **times, **costs,
            "host": describe.platform.node(), "steps": steps, "source": "measured"}


def main(argv=None) -> None:
    parser = step.parser(__doc__)
    parser.add_argument("--cluster-profile",
                        help="a profile folder (make's PROFILE): its cluster file under the experiment")
    parser.add_argument("--environment", help="environment.json of the run (its precision and threads)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--barrier", help="folder where --parties profiles meet to start together")
    parser.add_argument("--parties", type=int, default=1)
    args = parser.parse_args(argv)
    config = load(args.config, args.cluster_profile)
    result = profile(config, args.environment, args.steps, args.warmup, args.barrier, args.parties)
    write_json(args.out, result)
    print(f"profile: {result['model']} ({result['model_code']}'s model code), batch {result['batch_size']} x "
          f"{result['seq_len']} tokens, "
          f"{result['threads']} thread(s), {result['precision']}: forward {result['forward']:.3f} s, backward "
          f"{result['backward']:.3f} s, update {result['update']:.3f} s; "
          f"{sum(b for b, _ in result['grads']) / 1e6:.1f} MB of gradients -> {args.out}")


if __name__ == "__main__":
    step.entry(main)
