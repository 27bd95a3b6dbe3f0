"""Where a drafter's training starts: random weights, the target's own last layers, or a
drafter trained before.

A drafter of the target's width can begin as the end of the target itself: its N layers copies
of the target's last N, its final norm the target's, fc reading only the deepest feature layer
the target exposes, and hidden_norm the first copied layer's input norm. The context keys and
values of the drafter's first layer are then the target's own keys and values of that layer
(RMSNorm ignores the scale fc leaves), so training refines a function that already reads the
context the way the target does, instead of discovering attention and the vocabulary's
geometry from noise. What does not carry over starts neutral: the target's q/k/v biases (the
drafter has none, as z-lab's) are dropped, and q/k norms the target lacks are ones.

A drafter trained before (a folder train-dflash wrote) starts a run from its own weights, with
a fresh optimizer and schedule: a drafter's files carry no optimizer state, so this is how
training goes on past one machine's time, the folder carried to the next.
"""

from __future__ import annotations

from pathlib import Path

import torch

from engine.errors import EngineError
from engine.loading.loader import read_safetensors
from engine.speculation.proposers.dflash.files import read_config
from engine.speculation.proposers.dflash.network import DFlashDrafter


@torch.no_grad()
def random_start(drafter: DFlashDrafter, std: float, generator: torch.Generator) -> None:
    for name, p in drafter.named_parameters():
        if "norm" in name:
            p.fill_(1.0)
        else:
            p.normal_(0.0, std, generator=generator)


@torch.no_grad()
def target_start(drafter: DFlashDrafter, target) -> None:
    """Copy the target's last len(drafter.layers) layers and final norm into the drafter; fc
    passes the deepest feature layer through (zero weights for the others, which gradients move)."""
    decoder = target.decoder
    first = len(decoder.layers) - len(drafter.layers)
    if first < 0:
        raise EngineError(f"a drafter of {len(drafter.layers)} layers cannot start from a target of "
                          f"{len(decoder.layers)}: give it at most as many layers")
    for mine, theirs in zip(drafter.layers, decoder.layers[first:], strict=True):
        copy = {name: p for name, p in theirs.named_parameters() if not name.endswith("bias")}
        for name, p in mine.named_parameters():
            if name in copy:
                p.copy_(copy[name])  # copy_ takes the drafter's dtype and device
            elif "norm" in name:
                p.fill_(1.0)  # q/k norms of a target without them: start as the identity
    drafter.norm.weight.copy_(decoder.norm.weight)
    drafter.hidden_norm.weight.copy_(drafter.layers[0].input_layernorm.weight)
    h = drafter.config.shape.hidden_size
    deepest = drafter.target_layer_ids.index(max(drafter.target_layer_ids))  # fc's input block
    drafter.fc.weight.zero_()
    drafter.fc.weight[:, deepest * h : (deepest + 1) * h] = torch.eye(h)


@torch.no_grad()
def drafter_start(drafter: DFlashDrafter, folder: str | Path) -> None:
    """The weights of the drafter in `folder` (z-lab's format, as train-dflash writes it), which
    must be shaped as this one: layers, block, target layers read and mask token alike."""
    path = Path(folder)
    try:
        theirs = read_config(path)
    except EngineError as err:
        raise EngineError(f"--start-from: {err}") from None
    mine = drafter.config
    if theirs.to_zlab() != mine.to_zlab():
        raise EngineError(
            f"--start-from {folder}: a drafter of {theirs.shape.num_layers} layers, blocks of {theirs.block_size}, "
            f"reading target layers {list(theirs.target_layer_ids)}; this run trains {mine.shape.num_layers} "
            f"layers, blocks of {mine.block_size}, reading {list(mine.target_layer_ids)} (match --layers, or "
            "train for this target)"
        )
    drafter.load_zlab_state({k: v.float() for k, v in read_safetensors(path).items()})
