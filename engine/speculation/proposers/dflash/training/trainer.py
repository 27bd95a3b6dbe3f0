"""The training loop: the target frozen, the drafter learning to draft the target's own replies.

Each step takes `batch_size` samples in a fixed shuffled order, runs the target over them for
its hidden states, samples anchors, and takes one AdamW step on the blocks' weighted loss (bf16
autocast on CUDA). A few prompts (both their replies) never train: every minute of training the
drafter's acceptance is measured on them (validation.py), the figure to trust once an epoch is
over and every training block comes from text it has learnt from. Everything that decides the
next step (weights, optimizer moments, step, data position, the anchors' generator) is
checkpointed every few minutes and at the end, so `resume` reaches the same weights an
uninterrupted run would. The drafter is written in z-lab's format beside the checkpoint each time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from engine.errors import EngineError
from engine.speculation.proposers.dflash.files import TRAINING, drafter_config, save_drafter
from engine.speculation.proposers.dflash.network import DFlashDrafter
from engine.speculation.proposers.dflash.training.blocks import sample_anchors
from engine.speculation.proposers.dflash.training.checkpoint import load_checkpoint, save_checkpoint
from engine.speculation.proposers.dflash.training.forward import (
    batch_states,
    batch_states_and_final,
    block_loss,
)
from engine.speculation.proposers.dflash.training.order import epoch_order
from engine.speculation.proposers.dflash.training.schedule import learning_rate
from engine.speculation.proposers.dflash.training.start import drafter_start, random_start, target_start
from engine.speculation.proposers.dflash.training.validation import VALIDATION_SEED, split_validation
from engine.speculation.proposers.dflash.vocab import DraftVocab, frequent_tokens, read_vocab

CHECKPOINTS = TRAINING  # the checkpoint's folder inside the drafter's
UNBOUNDED = 10**9  # the step bound of a run that its time budget ends
# A batch's length and block count are rounded up to these, so that steps come in a few shapes:
# cuDNN's attention builds a graph for every new shape and keeps it, and with a new length each
# step (length-matched batches) the H200's profile showed the host 78 ms in each backward call
# while the device waited. Pads and unkept blocks change no loss or gradient (tests).
LENGTH_STEP = 256
ANCHOR_STEP = 64


@dataclass
class Sample:
    ids: list[int]  # the prompt through the chat template, then the target's reply
    reply_start: int  # ids[reply_start:] is the reply: the tokens the loss covers


@dataclass
class TrainSettings:
    num_layers: int = 2
    block_size: int = 16
    anchors: int = 256  # blocks per sample per step
    gamma: float = 7.0  # loss weight exp(-(i-1)/gamma) along the block
    learning_rate: float = 6e-4
    warmup_steps: int = 20
    weight_decay: float = 0.01
    clip: float = 1.0
    batch_size: int = 8  # samples per step (as much learnt per sample as 4 on the H200, at 1.2x the samples/s)
    max_length: int = 2048  # longer samples are cut
    epochs: int | None = None  # default: one, or as many as a time budget allows
    steps: int | None = None  # total steps (default: the epochs' worth, or what --minutes allows)
    minutes: float | None = None  # time budget of the whole training, resumed runs included
    checkpoint_minutes: float = 5.0
    seed: int = 0
    mask_token_id: int | None = None
    init_std: float = 0.02
    # train fc on the target's states divided by each channel's RMS (measured on the first batch)
    # and fold that into fc when writing: the states' channels differ by hundreds of times (a few
    # carry massive activations), and Adam moves every weight by about the same step, so without
    # it the loud channels' weights swing while the quiet ones' barely move
    standardize_features: bool = False
    # start from the target's last layers (start.py) instead of random weights
    start_from_target: bool = False
    # start from the weights (and draft vocabulary) of a drafter trained before, in this folder
    # (start.py); overrides start_from_target
    start_from: str | None = None
    # W: each row's training target is W * the target's own next-token distribution + (1 - W) *
    # the reply's token (knowledge distillation); 0 trains on the reply's tokens alone
    distill: float = 0.0
    # N > 0: the drafter drafts over the N tokens most frequent in the training replies (vocab.py),
    # its loss two products over N rows of lm_head instead of all; 0: the target's whole vocabulary
    draft_vocab: int = 0
    # prompts whose samples never train, at most a tenth of them (validation.py), and the
    # training minutes between two measurements on them
    validation_prompts: int = 16
    validation_minutes: float = 1.0


@dataclass
class StepReport:
    step: int
    total: int
    loss: float
    accepted_at: list[float]  # per block position, the share of blocks whose drafts up to it are right
    samples: int  # seen since the start, resumed runs included
    tokens: int
    seconds: float  # training time since the start
    learning_rate: float
    validation_tau: float | None = None  # the latest measurement on the held-out samples

    @property
    def tau(self) -> float:
        """Expected tokens per step of this step's blocks (greedy drafts, the bonus included)."""
        return 1.0 + sum(self.accepted_at)


def history_row(report: StepReport) -> list:
    """[step, samples, seconds, loss, tau, acceptance curve]: one row of history.json."""
    return [report.step, report.samples, round(report.seconds, 2), round(report.loss, 4), round(report.tau, 3),
            [float(f"{a:.4g}") for a in report.accepted_at]]  # the deep positions' small shares keep their digits


@dataclass
class RunState:
    step: int = 0
    epoch: int = 0
    position: int = 0  # next sample's place in this epoch's order
    samples: int = 0
    tokens: int = 0
    seconds: float = 0.0
    total: int = 0
    history: list = field(default_factory=list)
    validation: list = field(default_factory=list)  # [step, samples, seconds, loss, tau, curve] rows


class Trainer:
    def __init__(self, target, samples: list[Sample], settings: TrainSettings, out: str | Path,
                 resume: bool = False):
        if not samples:
            raise EngineError("no training samples")
        if target.max_context < settings.max_length + settings.block_size:
            raise EngineError(f"the target's context of {target.max_context} tokens is under the samples' "
                              f"{settings.max_length} (raise --max-context or lower --max-length)")
        self.target, self.settings = target, settings
        self.out = Path(out)
        for p in target.decoder.parameters():
            p.requires_grad_(False)
        self.device = target.device
        self.autocast = self.device.type == "cuda"
        checkpoint = load_checkpoint(self.out / CHECKPOINTS) if resume else None
        if checkpoint is not None:
            # a run from before held-out samples trained on all of them: it goes on so
            saved = {"validation_prompts": 0, **checkpoint["settings"]}
            settings = self.settings = TrainSettings(**{**saved, "minutes": settings.minutes,
                                                        "checkpoint_minutes": settings.checkpoint_minutes})
        self.digest = self.data_digest(samples)
        if checkpoint is not None and checkpoint.get("data", self.digest) != self.digest:
            raise EngineError(f"{self.out} was trained on other samples than these: resume it with the same "
                              "prompts and replies, or train a new drafter (another --out)")
        # the split is a function of the samples and the seed: a resumed run holds out the same
        self.samples, self.validation = split_validation(samples, settings.validation_prompts, settings.seed)
        cfg = drafter_config(target, settings.num_layers, settings.block_size, settings.mask_token_id)
        self.drafter = DFlashDrafter(cfg).to(torch.float32)
        self.generator = torch.Generator().manual_seed(settings.seed)
        if checkpoint is None:
            self._initialise()  # on the CPU: the generator (and so the weights) are the same on any device
        self.drafter.to(self.device)
        self.optimizer = torch.optim.AdamW(self.drafter.parameters(), lr=settings.learning_rate,
                                           weight_decay=settings.weight_decay, betas=(0.9, 0.95))
        self.state = RunState(total=settings.steps or self._epoch_steps())
        self._epoch_order: tuple[int, list[int]] = (-1, [])
        self.feature_scale: torch.Tensor | None = None  # [n * H] in the target's state order
        # the drafter's own vocabulary, a function of the training samples (a resumed run, given
        # the same ones, finds the same)
        self.vocab: DraftVocab | None = None
        kept = read_vocab(settings.start_from) if settings.start_from else None
        if kept is not None:  # a drafter trained on goes on drafting over its own tokens
            self.vocab = DraftVocab(kept, target.decoder.lm_head.weight)
        elif 0 < settings.draft_vocab < target.config.vocab_size:
            ids = frequent_tokens([x.ids[x.reply_start :] for x in self.samples], settings.draft_vocab)
            self.vocab = DraftVocab(ids, target.decoder.lm_head.weight)
        if checkpoint is not None:
            self._restore(checkpoint)

    def _epoch_steps(self) -> int:
        """The planned steps: the epochs asked for; with a time budget and no epochs, no bound
        (the budget ends the run)."""
        s = self.settings
        if s.epochs is None and s.minutes:
            return UNBOUNDED
        return (s.epochs or 1) * -(-len(self.samples) // s.batch_size)

    def _initialise(self) -> None:
        random_start(self.drafter, self.settings.init_std, self.generator)  # draws the same numbers either way
        if self.settings.start_from:
            drafter_start(self.drafter, self.settings.start_from)
        elif self.settings.start_from_target:
            target_start(self.drafter, self.target)

    def _restore(self, checkpoint: dict) -> None:
        self.drafter.load_state_dict(checkpoint["drafter"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.generator.set_state(checkpoint["generator"])
        self.state = RunState(**checkpoint["run"])
        scale = checkpoint.get("feature_scale")
        self.feature_scale = None if scale is None else scale.to(self.device)

    def checkpoint(self) -> None:
        save_checkpoint(self.out / CHECKPOINTS, {
            "settings": asdict(self.settings), "drafter": self.drafter.state_dict(),
            "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
            "run": asdict(self.state), "feature_scale": self.feature_scale, "data": self.digest,
        })
        save_drafter(self.drafter, self.out, self.target.dtype, self.fc_scale(),
                     None if self.vocab is None else self.vocab.ids.tolist())
        # the loss curve, small enough to keep and plot: [step, samples, seconds, loss, tau,
        # acceptance curve] rows, the training steps' and the validation's
        (self.out / CHECKPOINTS / "history.json").write_text(json.dumps(
            {"settings": asdict(self.settings), "total": self.state.total, "history": self.state.history,
             "validation": self.state.validation, "validation_samples": len(self.validation)}))

    def run(self, on_step: Callable[[StepReport], None] | None = None, stop_after: int | None = None,
            stop_after_seconds: float | None = None) -> RunState:
        """Train until the steps are done, the time budget is spent, or this call has run
        `stop_after` steps or `stop_after_seconds` (a run split over calls: resume it later);
        then checkpoint and write the drafter."""
        s, state = self.settings, self.state
        last_step = state.total if stop_after is None else min(state.total, state.step + stop_after)
        budget = s.minutes * 60 if s.minutes else float("inf")
        if stop_after_seconds is not None:
            budget = min(budget, state.seconds + stop_after_seconds)
        last_checkpoint = time.perf_counter()
        self.target.state_layers = self.drafter.state_layers
        try:
            while state.step < min(last_step, state.total) and state.seconds < budget:
                started = time.perf_counter()
                report = self.step()
                state.seconds += time.perf_counter() - started
                report.seconds = state.seconds
                state.history.append(history_row(report))
                report.total = self._estimated_total()
                if self._validation_due():  # off the training clock
                    state.validation.append(history_row(self.validate()))
                if state.validation:
                    report.validation_tau = state.validation[-1][4]
                if on_step is not None:
                    on_step(report)
                if time.perf_counter() - last_checkpoint > s.checkpoint_minutes * 60:
                    self.checkpoint()
                    last_checkpoint = time.perf_counter()
            if self.validation and state.step and (not state.validation or state.validation[-1][0] != state.step):
                state.validation.append(history_row(self.validate()))  # where the run ends
        finally:
            self.target.state_layers = ()
        self.checkpoint()
        return state

    @staticmethod
    def data_digest(samples: list[Sample]) -> str:
        """What a resumed run checks it is given the samples it started on: a digest of every
        sample's tokens, in order (the epochs' order and the held-out split follow from them)."""
        digest = hashlib.sha256()
        for x in samples:
            digest.update(struct.pack(f"<{len(x.ids) + 2}q", len(x.ids), x.reply_start, *x.ids))
        return digest.hexdigest()

    def _validation_due(self) -> bool:
        if not self.validation:
            return False
        last = self.state.validation[-1][2] if self.state.validation else 0.0
        return self.state.seconds - last >= self.settings.validation_minutes * 60

    @torch.no_grad()
    def validate(self) -> StepReport:
        """The loss and acceptance curve on the held-out samples, the same blocks every time (their
        anchors drawn from a fixed seed), the figures weighted by each batch's blocks."""
        s, state = self.settings, self.state
        generator = torch.Generator().manual_seed(s.seed + VALIDATION_SEED)
        loss_sum, curve_sum, blocks_seen = 0.0, None, 0
        ranked = sorted(self.validation, key=lambda x: len(x.ids))  # like lengths together: less padding
        for start in range(0, len(ranked), s.batch_size):
            loss, accepted, kept = self._batch_loss(ranked[start : start + s.batch_size], generator)
            loss_sum += float(loss) * kept
            curve = accepted.double() * kept
            curve_sum = curve if curve_sum is None else curve_sum + curve
            blocks_seen += kept
        blocks_seen = max(blocks_seen, 1)
        return StepReport(state.step, state.total, loss_sum / blocks_seen, (curve_sum / blocks_seen).tolist(),
                          state.samples, state.tokens, state.seconds, 0.0)

    @property
    def timed(self) -> bool:
        """A run that its time budget ends (no step count): its cosine follows the clock, so it
        anneals exactly when the budget runs out, whatever speed the machine reaches."""
        return self.settings.steps is None and bool(self.settings.minutes)

    def _done(self) -> float:
        s, state = self.settings, self.state
        by_steps = (state.step - s.warmup_steps) / max(1, state.total - s.warmup_steps)
        if not self.timed:
            return by_steps
        by_time = state.seconds / (s.minutes * 60)
        return by_time if state.total == UNBOUNDED else max(by_time, by_steps)

    def _estimated_total(self) -> int:
        """For the progress bar: the steps the budget will hold at the speed so far."""
        s, state = self.settings, self.state
        if not self.timed or state.seconds <= 0:
            return state.total
        fits = state.step + int(max(s.minutes * 60 - state.seconds, 0.0) * state.step / state.seconds)
        return min(state.total, max(state.step, fits))

    def step(self) -> StepReport:
        s, state = self.settings, self.state
        batch = self._next_batch()
        loss, accepted, _ = self._batch_loss(batch, self.generator)
        lr = learning_rate(state.step, self._done(), s.learning_rate, s.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.drafter.parameters(), s.clip)
        self.optimizer.step()
        state.step += 1
        state.samples += len(batch)
        state.tokens += sum(len(x.ids) for x in batch)
        # read back once the step is queued whole: the one wait for the device a step has
        return StepReport(state.step, state.total, float(loss.detach()), accepted.tolist(), state.samples,
                          state.tokens, state.seconds, lr)

    def _batch_loss(self, batch: list[Sample], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(the blocks' loss, their acceptance curve, how many blocks are kept) of a batch, its
        anchors drawn from `generator` (a training step's, or the held-out samples' fixed one)."""
        s = self.settings
        ids, loss_mask = self.padded(batch)
        # drawn (on the host) before the target's pass is queued: reading the mask back then waits
        # for nothing, where after it the host would wait for the whole pass before queueing more
        blocks = sample_anchors(loss_mask, s.anchors, generator, ANCHOR_STEP)
        kept = int(blocks.keep.sum())
        blocks.anchors, blocks.keep = blocks.anchors.to(self.device), blocks.keep.to(self.device)
        states, final = self._states(batch, ids)
        autocast = torch.autocast("cuda", torch.bfloat16) if self.autocast else contextlib.nullcontext()
        with autocast:
            loss, accepted = block_loss(self.drafter, self.target, states, ids, loss_mask, blocks, s.gamma,
                                        final, s.distill, self.vocab)
        return loss, accepted, kept

    def _next_batch(self) -> list[Sample]:
        """The next samples in this epoch's fixed order (a new order each epoch, from the seed,
        its batches of similar lengths: order.py)."""
        s, state = self.settings, self.state
        batch = []
        while len(batch) < s.batch_size:
            take = self._order(state.epoch)[state.position : state.position + s.batch_size - len(batch)]
            batch += [self.samples[i] for i in take]
            state.position += len(take)
            if state.position >= len(self.samples):
                state.epoch, state.position = state.epoch + 1, 0
        return batch

    def _order(self, epoch: int) -> list[int]:
        if self._epoch_order[0] != epoch:
            lengths = [min(len(x.ids), self.settings.max_length) for x in self.samples]
            self._epoch_order = (epoch, epoch_order(lengths, self.settings.batch_size, self.settings.seed, epoch))
        return self._epoch_order[1]

    def _tensors(self, batch: list[Sample]
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """ids and loss mask [b, S], the target's states [b, S, n * H], padded to the longest sample
        (divided by the feature scale where the run standardizes them), and where the run
        distills, the target's final hidden [b, S, H] (None otherwise: its last layers and their
        logits are never run)."""
        ids, loss_mask = self.padded(batch)
        return ids, loss_mask, *self._states(batch, ids)

    def _states(self, batch: list[Sample], ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The target's states of ids [b, S] and, where the run distills, its final hidden (see
        _tensors)."""
        if self.settings.distill > 0.0:
            states, final = batch_states_and_final(self.target, ids)
        else:
            states, final = batch_states(self.target, ids), None
        if not self.settings.standardize_features:
            return states, final
        if self.feature_scale is None:
            self.feature_scale = channel_rms([min(len(x.ids), self.settings.max_length) for x in batch], states)
            if (self.settings.start_from_target or self.settings.start_from) and self.state.step == 0:
                with torch.no_grad():  # fc reads the states as they were when it was copied
                    self.drafter.fc.weight.mul_(self.fc_scale())
        return states / self.feature_scale.to(states.dtype), final

    def fc_scale(self) -> torch.Tensor | None:
        """The feature scale in the order fc reads the target's layers (the config's)."""
        if self.feature_scale is None:
            return None
        n = len(self.drafter.state_layers)
        return self.feature_scale.view(n, -1)[self.drafter.state_order].flatten()

    def padded(self, batch: list[Sample]) -> tuple[torch.Tensor, torch.Tensor]:
        """ids and loss mask [b, S] on the device, each sample cut at max_length and right-padded,
        S a multiple of LENGTH_STEP."""
        cut = [x.ids[: self.settings.max_length] for x in batch]
        length = -(-max(len(c) for c in cut) // LENGTH_STEP) * LENGTH_STEP
        ids = torch.zeros(len(batch), length, dtype=torch.long)
        loss_mask = torch.zeros(len(batch), length)
        for row, (sample, c) in enumerate(zip(batch, cut, strict=True)):
            ids[row, : len(c)] = torch.tensor(c)
            loss_mask[row, sample.reply_start : len(c)] = 1.0
        return ids.to(self.device), loss_mask.to(self.device)


def channel_rms(lengths: list[int], states: torch.Tensor) -> torch.Tensor:
    """Each channel's RMS over a batch's real tokens [n * H], the first token of each sequence
    left out (it carries the massive activations that would set the scale of a few channels),
    floored so that no channel is raised more than a hundredfold."""
    lengths = torch.tensor(lengths, device=states.device)
    real = torch.arange(states.shape[1], device=states.device)[None, :] < lengths[:, None]
    real[:, 0] = False
    rows = states[real].float()
    return rows.pow(2).mean(0).sqrt().clamp(min=1e-2)
