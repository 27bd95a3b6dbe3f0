"""DFlash: a block-diffusion drafter reads the target's hidden states and drafts a whole block in one pass.

proposer.py drafts with it, network.py is the drafter, graphs.py its CUDA graphs, files.py its
files in z-lab's format."""

from __future__ import annotations

import tempfile
from pathlib import Path

from engine.speculation.proposers.dflash.files import (
    cached_drafter_dir,
    find_cached_drafter,
    load_drafter,
    save_drafter,
    write_random_drafter,
)
from engine.speculation.proposers.dflash.proposer import DFlashProposer
from engine.speculation.proposers.spec import Need, ProposerOptions, ProposerSpec

RANDOM = "random"  # --dflash random: a drafter with random weights, to run the path and time a pass


def load(target, options: ProposerOptions):
    source = options.sources["dflash"]
    if source != RANDOM:
        drafter = load_drafter(source, target)
    else:
        with tempfile.TemporaryDirectory(prefix="specchat-dflash-") as tmp:
            drafter = load_drafter(str(write_random_drafter(Path(tmp) / "random-drafter", target)), target)
    drafter.random = source == RANDOM
    return drafter


SPEC = ProposerSpec(
    name="dflash",
    label="DFlash",
    summary="a block-diffusion drafter reads the target's hidden states and drafts a block in one pass",
    need=Need("dflash", "DRAFTER", f"DFlash drafter directory or hub id (z-lab format); '{RANDOM}': random weights",
              "no --dflash drafter given, and none trained for this model in the cache"),
    load=load,
    make=lambda drafter, k: DFlashProposer(drafter, k=k),
    max_k=lambda drafter: drafter.block_size - 1,
    default_k=15,
    order=30,
    describe=lambda drafter: "DFlash (random weights)" if drafter.random else "DFlash",
    find=find_cached_drafter,
)

__all__ = ["RANDOM", "SPEC", "DFlashProposer", "cached_drafter_dir", "load_drafter", "save_drafter",
           "write_random_drafter"]
