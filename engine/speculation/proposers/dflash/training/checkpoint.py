"""A training run's whole state in one file, so a resumed run continues exactly where it stopped:
the drafter's weights, the optimizer's moments, the step, the place in the data, the anchors'
random-number generator and the history so far. Written under another name and renamed, so an
interruption mid-write leaves the previous checkpoint whole."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from engine.errors import EngineError

NAME = "checkpoint.pt"


def save_checkpoint(folder: Path, state: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / NAME
    torch.save(state, folder / (NAME + ".partial"))
    os.replace(folder / (NAME + ".partial"), path)
    return path


def load_checkpoint(folder: Path) -> dict:
    path = folder / NAME
    if not path.is_file():
        raise EngineError(f"nothing to resume: {path} does not exist (train without --resume first)")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as err:
        raise EngineError(f"cannot read the checkpoint {path}: {err}") from None
