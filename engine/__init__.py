"""specchat's inference engine: load a model, then generate with or without speculation.

    from engine import load_model, generate, SamplingParams, NgramProposer
    model = load_model("smollm2-135m")
    result = generate(model, ids, sampling=SamplingParams(), speculative=NgramProposer(k=4))

This module is the engine's one door: front ends import only the names in `__all__`.
The rooms behind it (docs/ARCHITECTURE.md): network/ (what a model computes), loading/ (files,
packs, tokenizers), runtime/ (steps, KV cache, sampling, CUDA graphs), batching/ (many sequences per step),
kernels/ (Triton),
speculation/ (the loop, metrics, the proposers and their registry; DFlash drafters' training).

Each name is imported from its room when it is first asked for, so a front end that only lists
proposers or prints its help (the errors, the limits, the registry's declarations) never loads
torch.
"""

from __future__ import annotations

import importlib

_DRAFTER_FILES = "engine.speculation.proposers.dflash.files"
_TRAINING = "engine.speculation.proposers.dflash.training"

# exported name -> (module, its name there)
_ROOMS = {
    "BatchDecoder": ("engine.batching.decode", "BatchDecoder"),
    "BatchTimes": ("engine.batching.times", "BatchTimes"),
    "Finished": ("engine.batching.decode", "Finished"),
    "generate_batch": ("engine.batching.decode", "generate_batch"),
    "EngineError": ("engine.errors", "EngineError"),
    "AUTO": ("engine.limits", "AUTO"),
    "MAX_K": ("engine.limits", "MAX_K"),
    "MAX_STEP": ("engine.limits", "MAX_STEP"),
    "PAGE_SIZE": ("engine.limits", "PAGE_SIZE"),
    "check_k": ("engine.limits", "check_k"),
    "load_model": ("engine.loading.loader", "load_model"),
    "PACKS": ("engine.loading.packs", "PACKS"),
    "cache_root": ("engine.loading.packs", "cache_root"),
    "ensure_pack": ("engine.loading.packs", "ensure"),
    "pack_dir": ("engine.loading.packs", "model_dir"),
    "Detokenizer": ("engine.loading.tokenizer", "Detokenizer"),
    "DTYPES": ("engine.network.config", "DTYPES"),
    "PRESETS": ("engine.network.config", "PRESETS"),
    "ModelConfig": ("engine.network.config", "ModelConfig"),
    "preset": ("engine.network.config", "preset"),
    "profile_steps": ("engine.profile", "profile_steps"),
    "launch_label": ("engine.kernels.overlap", "launch_label"),
    "Model": ("engine.runtime.model", "Model"),
    "random_model": ("engine.runtime.model", "random_model"),
    "SamplingParams": ("engine.runtime.sampling", "SamplingParams"),
    "AutoProposer": ("engine.speculation.auto", "AutoProposer"),
    "DraftCheck": ("engine.speculation.inspection", "DraftCheck"),
    "Inspection": ("engine.speculation.inspection", "Inspection"),
    "Generation": ("engine.speculation.loop", "Generation"),
    "Result": ("engine.speculation.loop", "Result"),
    "Step": ("engine.speculation.loop", "Step"),
    "generate": ("engine.speculation.loop", "generate"),
    "stream": ("engine.speculation.loop", "stream"),
    "rehearse": ("engine.speculation.rehearsal", "rehearse"),
    "Metrics": ("engine.speculation.metrics", "Metrics"),
    "Proposal": ("engine.speculation.proposers.base", "Proposal"),
    "Proposer": ("engine.speculation.proposers.base", "Proposer"),
    "RANDOM_DRAFTER": ("engine.speculation.proposers.dflash", "RANDOM"),
    "DEFAULT_DRAFT_VOCAB": ("engine.limits", "DEFAULT_DRAFT_VOCAB"),
    "DFlashProposer": ("engine.speculation.proposers.dflash.proposer", "DFlashProposer"),
    "cached_drafter_dir": (_DRAFTER_FILES, "cached_drafter_dir"),
    "load_drafter": (_DRAFTER_FILES, "load_drafter"),
    "save_drafter": (_DRAFTER_FILES, "save_drafter"),
    "write_random_drafter": (_DRAFTER_FILES, "write_random_drafter"),
    "build_prompts": (f"{_TRAINING}.data", "build_prompts"),
    "measure_tau": (f"{_TRAINING}.evaluate", "measure_tau"),
    "train_dflash": (f"{_TRAINING}.run", "train_dflash"),
    "StepReport": (f"{_TRAINING}.trainer", "StepReport"),
    "TrainSettings": (f"{_TRAINING}.trainer", "TrainSettings"),
    "DraftProposer": ("engine.speculation.proposers.draft.proposer", "DraftProposer"),
    "NgramProposer": ("engine.speculation.proposers.ngram.proposer", "NgramProposer"),
    "Need": ("engine.speculation.proposers.spec", "Need"),
    "ProposerOptions": ("engine.speculation.proposers.spec", "ProposerOptions"),
    "ProposerSpec": ("engine.speculation.proposers.spec", "ProposerSpec"),
    "LoadedProposer": ("engine.speculation.registry", "LoadedProposer"),
    "find_spec": ("engine.speculation.registry", "find_spec"),
    "load_proposer": ("engine.speculation.registry", "load_proposer"),
    "missing": ("engine.speculation.registry", "missing"),
    "offered": ("engine.speculation.registry", "offered"),
    "proposer_specs": ("engine.speculation.registry", "proposer_specs"),
    "register": ("engine.speculation.registry", "register"),
    "unregister": ("engine.speculation.registry", "unregister"),
}

__all__ = list(_ROOMS)


def __getattr__(name: str):
    if name not in _ROOMS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    module, attribute = _ROOMS[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # asked once: later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
