"""What one rank trains with, and where its loop is: built once, saved in
checkpoints through state_dict() and restored with load_state_dict()."""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from workflow.scripts.common import tasks

from workflow.scripts.probes import intel
from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.common.errors import UserError
from workflow.scripts.common.modeling import accepted_columns, autocast_for, load_tokenizer, takes_packed
from workflow.scripts.settings.views import TrainSettings, TrainView
from workflow.scripts.launch.ranks import DistEnv
from workflow.scripts.data.arrow_split import ArrowSplit
from workflow.scripts.data.batching import DistributedLengthGroupedSampler, packed_collate, pad_collate
from workflow.scripts.train import denormals, lora, master, master_kernel, model_code, schedule, speed
from workflow.scripts.train.master import MasterAdamW
from workflow.scripts.train.comm import CommTimer
from workflow.scripts.train.step_phases import WARMUP_STEPS, StepPhases


@dataclass
class Progress:
    """Where the loop is and what it has done, for logs, checkpoints and metrics."""
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    samples: int = 0
    losses: list = field(default_factory=list)
    seconds: float = 0.0
    resumed_from_step: int | None = None
    position_at_start: int = 0  # samples already trained before this process started
    first_step_at: float | None = None  # wall clock (epoch seconds) when this process's first step ended
    started_at: float | None = None  # wall clock when the process that trained started
    # Samples/s after the process's warm-up steps (loop.WARMUP_STEPS), and where they ended.
    steady_samples_per_second: float | None = None
    warm: tuple | None = None
    # Evaluation during training (train/evaluation.py): every evaluation's
    # metrics, the best so far ({"step", "metric", "value"}), evaluations in
    # a row without a gain, and whether early stopping ended the training.
    evaluations: list = field(default_factory=list)
    best: dict | None = None
    stale: int = 0
    stopped_early: bool = False

    SAVED = ("step", "epoch", "batch_in_epoch", "samples", "losses")  # what a resumed run continues from
    EVALUATED = ("evaluations", "best", "stale", "stopped_early")  # absent from an older cpuddp's checkpoints
    # How the try that trained last went: the final checkpoint keeps it, so
    # that a retry with nothing left to train reports that training's speed.
    MEASURED = ("seconds", "position_at_start", "first_step_at", "started_at", "steady_samples_per_second")

    def state_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k in self.SAVED + self.MEASURED + self.EVALUATED}

    def load_state_dict(self, state: dict) -> None:
        for key in self.SAVED:
            setattr(self, key, state[key])
        for key in self.MEASURED:  # absent from an older cpuddp's checkpoints
            setattr(self, key, state.get(key, getattr(Progress, key)))
        for key in self.EVALUATED:
            setattr(self, key, state.get(key, getattr(Progress(), key)))
        self.resumed_from_step = self.step


@dataclass
class TrainingState:
    """Everything one rank trains with."""
    ddp_model: DDP
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    loader: torch.utils.data.DataLoader
    sampler: DistributedLengthGroupedSampler
    autocast: object
    comm: CommTimer
    total_steps: int
    max_grad_norm: float = 1.0
    log_every: int = 10
    """A progress line (and the loss averaged over ranks) every this many updates."""
    checkpoint_every: int = 0
    """A checkpoint every this many updates within an epoch (0: at epoch ends only)."""
    choice: model_code.Choice = model_code.Choice("transformers", "as given")
    """Whose model code trains (train/model_code.py): the run line, the records and the fingerprint say it."""
    phases: StepPhases = field(default_factory=StepPhases)
    """Where this rank's updates go, phase by phase (train/step_phases.py)."""
    flush_denormals: object = contextlib.nullcontext
    """The optimizer step's context: the denormal flush on torch's threads (train/denormals.py), or none."""

    def clipped_parameters(self):
        """What gradient clipping sees: the fp32 masters' gradients under
        bf16_master (widened from the bf16 ones), else the model's."""
        if isinstance(self.optimizer, MasterAdamW):
            return self.optimizer.stage_gradients()
        return self.model.parameters()

    def clip_gradients(self) -> torch.Tensor:
        """Clip the update's gradients to max_grad_norm; their total norm.
        bf16_master's one-pass optimizer sums it from the bf16 gradients and
        scales them as its step widens them; otherwise torch's clipping."""
        if isinstance(self.optimizer, MasterAdamW) and self.optimizer.one_pass:
            return self.optimizer.clip_grad_norm(self.max_grad_norm)
        return speed.clip_gradients(self.clipped_parameters(), self.max_grad_norm)

    def saved_model(self):
        """The model as save_pretrained writes it: fp32 (IPEX's or bf16_master's plain copy)."""
        if isinstance(self.optimizer, MasterAdamW):
            return self.optimizer.fp32_model(self.model)
        return self.model

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def accumulation_for(train: TrainSettings, planned_world: int, world: int) -> int:
    """Micro-batches per update that keep the planned global batch on the
    ranks there are (fewer after a node was dropped)."""
    global_batch = train.batch_size * planned_world * train.gradient_accumulation_steps
    if global_batch % (train.batch_size * world):
        raise UserError(f"global batch {global_batch} = {train.batch_size} x {planned_world} ranks x "
                        f"{train.gradient_accumulation_steps} accumulation cannot be kept on {world} ranks "
                        f"({train.batch_size} x {world} does not divide it); raise distributed.min_nodes or "
                        "choose a batch that every allowed node count divides")
    return global_batch // (train.batch_size * world)


def make_loader(split: ArrowSplit, train: TrainSettings, env: DistEnv, pad_id: int, planned_world: int,
                multi_label_width: int | None = None, packed: bool = False):
    """This rank's batches: padded for a transformers model, packed real
    tokens for cpuddp's encoder (`packed`; data/batching.py)."""
    lengths = split.lengths()
    if not lengths:
        raise UserError("the training split is empty; check data.train")
    accumulation = accumulation_for(train, planned_world, env.world_size)
    sampler = DistributedLengthGroupedSampler(lengths, train.batch_size, env.rank, env.world_size, train.seed,
                                              accumulation=accumulation, sample=train.sample_updates,
                                              warmup=WARMUP_STEPS)
    # Its own generator: each new iterator draws a seed from it, and drawn
    # from torch's global RNG that draw would shift the dropout masks of a
    # run resumed mid-epoch against an uninterrupted one.
    loader = torch.utils.data.DataLoader(
        split, batch_sampler=sampler,
        collate_fn=packed_collate(multi_label_width) if packed else pad_collate(pad_id, multi_label_width),
        generator=torch.Generator().manual_seed(train.seed))
    return loader, sampler


def undecayed_names(model) -> set[str]:
    """Biases and normalisation weights, which the Trainer does not decay
    (by module type, as it does, not by name: DeBERTa's and others' differ)."""
    norms = tuple(c for c in (torch.nn.LayerNorm, getattr(torch.nn, "RMSNorm", None)) if c)
    return {f"{prefix}.{name}".lstrip(".") for prefix, module in model.named_modules()
            for name, _ in module.named_parameters(recurse=False)
            if name == "bias" or isinstance(module, norms) or "norm" in type(module).__name__.lower()}


def ranks_without(here: bool) -> int:
    """How many ranks lack something (`here`: this rank has it); a collective, so every rank asks."""
    without = torch.tensor([0.0 if here else 1.0])
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(without)
    return int(without.item())


def denormal_flush(optimizer) -> tuple[object | None, str]:
    """train/denormals.py's flush for the optimizer's step where every rank
    can flush (the replicas take the same arithmetic), and the line saying so."""
    flush, line = denormals.flushing(optimizer)
    without = ranks_without(flush is not None or getattr(optimizer, "one_pass", False))
    if flush is not None and without:
        return None, f"not flushed: {without} rank(s) cannot flush, so no rank does (the replicas stay identical)"
    return flush, line


def one_pass_choice(parts: speed.Parts | None, decisions: RunDecisions | None) -> tuple[bool, str | None]:
    """Whether bf16_master's optimizer takes the one-pass step (train.speed
    optimizer one_pass), and why (None: the levers line says it all). Only
    if the kernel loaded on every rank: the replicas must take the same
    arithmetic (a collective, so every rank asks)."""
    if parts is None or decisions is None or decisions.precision != "bf16_master" \
            or decisions.levers.optimizer != "one_pass":
        return False, None
    without = ranks_without(parts.one_pass_optimizer)
    if not parts.one_pass_optimizer:
        return False, "off: the kernel did not load here (the levers line says why); the three-pass path"
    if without:
        return False, (f"off: {without} rank(s) could not load the kernel; every rank takes the "
                       "three-pass path, so that the replicas stay identical")
    return True, f"on: widen, clip, AdamW and the weights' rounding in one pass ({master_kernel.load()[1]})"


def make_optimizer(model, train: TrainSettings, total_steps: int, decisions: RunDecisions | None = None,
                   parts: speed.Parts | None = None, log=None):
    undecayed = undecayed_names(model)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]  # train.lora freezes the rest
    groups = [
        {"params": [p for n, p in trainable if n not in undecayed], "weight_decay": train.weight_decay},
        {"params": [p for n, p in trainable if n in undecayed], "weight_decay": 0.0},
    ]
    one_pass, why = one_pass_choice(parts, decisions)
    if log and why:
        log.info(f"optimizer one_pass: {why}")
    # The fused CPU kernel updates all parameters in one pass: measured 4.5x
    # faster than foreach (about 20% of a MiniLM step on one thread).
    kind = MasterAdamW if decisions and decisions.precision == "bf16_master" else torch.optim.AdamW
    # The embedding tables: the one-pass update skips their rows that cannot change.
    extra = {"one_pass": True, "row_sparse": master.embedding_tables(model),
             "row_hint": parts.pool.rows_of if parts else None} if one_pass else {}
    optimizer = kind(groups, lr=train.learning_rate, betas=(train.adam_beta1, train.adam_beta2),
                     eps=train.adam_epsilon, fused=True, **extra)
    if decisions and decisions.ipex:  # before the scheduler, which wraps optimizer.step
        intel.optimize_training(model, optimizer, intel.torch_dtype(decisions.precision))
    warmup = int(train.warmup_ratio * total_steps)
    return optimizer, schedule.scheduler(train.lr_scheduler_type, optimizer, warmup, total_steps)


def total_steps(train: TrainSettings, steps_per_epoch: int) -> int:
    steps = math.ceil(train.epochs * steps_per_epoch)
    return min(steps, train.max_steps) if train.max_steps else steps


def build(cfg: TrainView, decisions: RunDecisions, data_dir: str, env: DistEnv, log) -> tuple[TrainingState, object]:
    split = ArrowSplit.load(data_dir, "train")
    task = tasks.for_data(cfg.task, split.features)
    train_cfg = cfg.train
    torch.manual_seed(train_cfg.seed)  # identical init; DDP broadcasts rank 0's anyway
    tokenizer = load_tokenizer(cfg.model, cfg.trust_remote_code)
    model, choice = model_code.load(train_cfg.model_code, cfg.model, task, tokenizer, decisions.ipex, decisions.levers,
                                    lora=train_cfg.lora is not None, trust_remote_code=cfg.trust_remote_code)
    log.info(choice.line())
    model, adapters = lora.apply(model, train_cfg.lora)  # train.lora: peft's adapters, the rest frozen
    if adapters:
        log.info(adapters)
    if decisions.precision == "bf16_master":
        head = master.to_bf16_encoder(model)
        log.info(f"bf16_master: the encoder in bf16, {', '.join(head)} in fp32, fp32 masters in the optimizer")
    parts = speed.Parts(backend=decisions.backend, precision=decisions.precision,
                        timeout_s=60 * cfg.distributed.timeout_minutes)
    parts, status = speed.apply(model, decisions.levers, parts)
    log.info("levers: " + "; ".join(f"{name} {state}" for name, state in status.items()))
    torch.manual_seed(train_cfg.seed + env.rank)  # different dropout per rank
    split = split.select_columns(accepted_columns(model, split.column_names))
    loader, sampler = make_loader(split, train_cfg, env, tokenizer.pad_token_id, decisions.world_size,
                                  task.num_labels if task.multi_label else None, packed=takes_packed(model))
    steps = total_steps(train_cfg, len(sampler))
    optimizer, scheduler = make_optimizer(model, train_cfg, steps, decisions, parts, log)
    flush, line = denormal_flush(optimizer)
    log.info(f"optimizer denormals: {line}")
    if decisions.ipex:
        log.info(f"IPEX optimized the model for training ({decisions.precision}): "
                 f"{intel.ipex_modules(model)} modules replaced")
    comm = CommTimer(cfg.distributed.gradient_compression, rows_of=parts.rows_of, touched=parts.pool,
                     node=parts.node, views=parts.views)
    ddp_model = DDP(model, gradient_as_bucket_view=True, bucket_cap_mb=cfg.distributed.bucket_cap_mb,
                    **speed.buffer_sync(model))
    ddp_model.register_comm_hook(comm, CommTimer.hook)
    log.info(f"{len(split)} training features, {len(sampler)} steps per epoch, {steps} steps, "
             f"global batch {sampler.global_size} = {train_cfg.batch_size} per rank x {env.world_size} ranks "
             f"x {sampler.accumulation} accumulation")
    state = TrainingState(ddp_model, model, optimizer, scheduler, loader, sampler,
                          autocast_for("fp32" if decisions.precision == "bf16_master" else decisions.precision),
                          comm, steps, train_cfg.max_grad_norm,
                          train_cfg.log_every, train_cfg.checkpoint_every, choice,
                          flush_denormals=flush or contextlib.nullcontext)
    return state, tokenizer
