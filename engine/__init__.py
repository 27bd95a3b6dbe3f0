"""specchat's inference engine: load a model, then generate with or without speculation.

    from engine import load_model, generate, SamplingParams, NgramProposer
    model = load_model("smollm2-135m")
    result = generate(model, ids, sampling=SamplingParams(), speculative=NgramProposer(k=4))

This module is the engine's one door: front ends import only the names in `__all__`.
The rooms behind it (docs/ARCHITECTURE.md): network/ (what a model computes), loading/ (files,
packs, tokenizers), runtime/ (steps, KV cache, sampling, CUDA graphs), batching/ (many sequences per step),
kernels/ (Triton),
speculation/ (the loop, metrics, the proposers and their registry; DFlash drafters' training).
"""

from engine.batching.decode import BatchDecoder, Finished, generate_batch
from engine.errors import EngineError
from engine.limits import MAX_K, MAX_STEP, PAGE_SIZE
from engine.loading.loader import DTYPES, load_model
from engine.loading.packs import PACKS, cache_root
from engine.loading.packs import ensure as ensure_pack
from engine.loading.packs import model_dir as pack_dir
from engine.loading.tokenizer import Detokenizer
from engine.network.config import PRESETS, ModelConfig, preset
from engine.profile import profile_steps
from engine.runtime.model import Model, random_model
from engine.runtime.sampling import SamplingParams
from engine.speculation.auto import AutoProposer
from engine.speculation.inspection import DraftCheck, Inspection
from engine.speculation.loop import Generation, Result, Step, generate, stream
from engine.speculation.metrics import Metrics
from engine.speculation.proposers.base import AUTO, Proposal, Proposer, check_k
from engine.speculation.proposers.dflash import RANDOM as RANDOM_DRAFTER
from engine.speculation.proposers.dflash import (
    DFlashProposer,
    cached_drafter_dir,
    load_drafter,
    save_drafter,
    write_random_drafter,
)
from engine.speculation.proposers.dflash.training.data import build_prompts
from engine.speculation.proposers.dflash.training.evaluate import measure_tau
from engine.speculation.proposers.dflash.training.run import train_dflash
from engine.speculation.proposers.dflash.training.trainer import StepReport, TrainSettings
from engine.speculation.proposers.draft import DraftProposer
from engine.speculation.proposers.ngram import NgramProposer
from engine.speculation.proposers.spec import Need, ProposerOptions, ProposerSpec
from engine.speculation.registry import (
    LoadedProposer,
    find_spec,
    load_proposer,
    missing,
    offered,
    proposer_specs,
    register,
    unregister,
)

__all__ = [
    "AUTO", "DTYPES", "MAX_K", "MAX_STEP", "PACKS", "PAGE_SIZE", "PRESETS", "RANDOM_DRAFTER",
    "AutoProposer", "BatchDecoder", "DFlashProposer", "Detokenizer", "DraftCheck", "DraftProposer", "EngineError", "Finished", "Generation", "Inspection",
    "LoadedProposer", "Metrics", "Model", "ModelConfig", "Need", "NgramProposer", "Proposal", "Proposer",
    "ProposerOptions", "ProposerSpec", "Result", "SamplingParams", "Step", "StepReport", "TrainSettings",
    "build_prompts", "cache_root", "cached_drafter_dir", "check_k", "ensure_pack",
    "find_spec", "generate", "generate_batch", "load_drafter", "load_model", "load_proposer", "measure_tau",
    "missing", "offered", "pack_dir", "preset", "profile_steps", "proposer_specs", "random_model", "register",
    "save_drafter", "stream", "train_dflash", "unregister", "write_random_drafter",
]
