"""DFlash: a block-diffusion drafter reads the target's hidden states and drafts a whole block in one pass.

proposer.py drafts with it, network.py is the drafter, graphs.py its CUDA graphs, files.py its
files in z-lab's format."""

from engine.speculation.proposers.spec import Need, ProposerSpec, deferred

RANDOM = "random"  # --dflash random: a drafter with random weights, to run the path and time a pass
DRAFTING = "engine.speculation.proposers.dflash.proposer"

SPEC = ProposerSpec(
    name="dflash",
    label="DFlash",
    summary="a block-diffusion drafter reads the target's hidden states and drafts a block in one pass",
    need=Need("dflash", "DRAFTER", f"DFlash drafter directory or hub id (z-lab format); '{RANDOM}': random weights",
              "no --dflash drafter given, and none trained for this model in the cache"),
    load=deferred(DRAFTING, "load"),
    make=deferred(DRAFTING, "make"),
    max_k=lambda drafter: drafter.block_size - 1,
    default_k=15,
    order=30,
    describe=lambda drafter: "DFlash (random weights)" if drafter.random else "DFlash",
    find=deferred("engine.speculation.proposers.dflash.files", "find_cached_drafter"),
)
