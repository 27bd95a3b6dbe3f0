"""`train_dflash`: the one call under `specchat train-dflash`. It checks that this machine can
train for the target at all, reads the samples, writes the data card, and runs the trainer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.errors import EngineError
from engine.speculation.proposers.dflash.training.checkpoint import NAME
from engine.speculation.proposers.dflash.training.data import data_card, read_samples, write_data_card
from engine.speculation.proposers.dflash.training.trainer import (
    CHECKPOINTS,
    RunState,
    StepReport,
    Trainer,
    TrainSettings,
)

CPU_LIMIT = 200_000_000  # target parameters past which a CPU run would take days


def check_machine(target) -> None:
    """Refuse, in one line, a run this machine cannot finish in reasonable time."""
    params = sum(p.numel() for p in target.decoder.parameters())
    if target.device.type != "cuda" and params > CPU_LIMIT:
        raise EngineError(
            f"training a DFlash drafter for {target.name} ({params / 1e9:.2f}B parameters) on the CPU would take "
            "days: it needs a CUDA GPU (one H200: about 20 minutes for a 1.5B target), or a target under "
            f"{CPU_LIMIT // 1_000_000}M parameters here")


def train_dflash(
    target,
    prompts: str | Path,
    replies: list[str | Path],
    out: str | Path,
    settings: TrainSettings | None = None,
    resume: bool = False,
    on_step: Callable[[StepReport], None] | None = None,
    stop_after_minutes: float | None = None,
) -> RunState:
    """Train a drafter for `target` on its own replies, written to `out` in z-lab's format
    (config.json, model.safetensors) with its data card; resume=True continues a run there.
    stop_after_minutes ends this call early (checkpointed), for a run split over several calls."""
    check_machine(target)
    settings = settings or TrainSettings()
    out = Path(out)
    if not resume and (out / CHECKPOINTS / NAME).exists():
        raise EngineError(f"{out} already holds a training run: --resume to continue it, or choose another --out")
    samples = read_samples(target, prompts, replies)
    trainer = Trainer(target, samples, settings, out, resume=resume)
    write_data_card(out, data_card(prompts, replies, samples, settings.max_length, len(trainer.validation),
                                   len(trainer.vocab or ())))
    return trainer.run(on_step, stop_after_seconds=None if stop_after_minutes is None else stop_after_minutes * 60)
