"""A DFlash drafter's files: z-lab's format (config.json with DFlashDraftModel, block size, target
layer ids and mask token id; safetensors under z-lab's key names), read for a target or written
with random weights (to run the path and time a pass where no trained drafter exists)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from engine.errors import EngineError
from engine.loading.loader import hub_snapshot, looks_like_hub_id, read_safetensors
from engine.loading.packs import PACKS, cache_root
from engine.speculation.proposers.dflash.network import (
    DFlashConfig,
    DFlashDrafter,
    distinct_target_layer_ids,
    zlab_weight_shapes,
)
from engine.speculation.proposers.dflash.vocab import read_vocab, write_vocab

TRAINING = "training"  # a trained drafter's run, beside its weights: checkpoint and history.json
MEASURED_STEPS = 50  # the training's last steps whose acceptance a loaded drafter starts from
MEASURED_SHARE = 0.01  # blocks that kept drafts 1..j, below which their share measures no a_j


def measured_acceptance(folder: Path, block_size: int) -> list[float] | None:
    """What its own training measured of a drafter trained here: a_j, the chance that draft j is
    kept given drafts 1..j-1 were, for j = 1..block_size-1, from training/history.json: the last
    measurement on the run's held-out samples where it has one, else the acceptance curves of its
    last steps (the share of blocks whose drafts 1..j were all right; hopeful past the first epoch,
    on text it has learnt from); None for a drafter without that history (z-lab's, or one copied
    without it)."""
    try:
        history = json.loads((folder / TRAINING / "history.json").read_text())
        held = [row[5] for row in history.get("validation") or [] if len(row[5]) == block_size - 1]
        curves = held[-1:] or [row[5] for row in history["history"][-MEASURED_STEPS:]
                               if len(row[5]) == block_size - 1]
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    if not curves:
        return None
    shares = [sum(c[j] for c in curves) / len(curves) for j in range(block_size - 1)]
    rates, before = [], 1.0
    for share in shares:
        rate = share / before if before > 1e-6 else (rates[-1] if rates else 0.0)
        if share < MEASURED_SHARE and rates:
            # too few blocks reach this deep, and the history's rounding is as large as the share
            # itself (0.004 / 0.002 reads as 0.5): a drafter keeps its deeper drafts no more often
            rate = min(rate, rates[-1])
        rates.append(min(0.98, max(0.02, rate)))
        before = share
    return rates


def load_drafter(path_or_hub_id: str, target) -> DFlashDrafter:
    """A DFlash drafter in z-lab's format (local directory or hub id), bound to `target`:
    it uses the target's embeddings and lm_head and reads its hidden states."""
    path = Path(os.path.expanduser(path_or_hub_id))
    if not path.exists():
        if not looks_like_hub_id(path_or_hub_id):
            raise EngineError(
                f"no DFlash drafter {path_or_hub_id!r}: not a directory, not a hub id (owner/name)"
            )
        path = hub_snapshot(path_or_hub_id)
    cfg = read_config(path)
    check_fits(cfg, target)
    tensors = read_safetensors(path)
    with torch.device("meta"):
        drafter = DFlashDrafter(cfg)
    drafter = drafter.to_empty(device=target.device).to(target.dtype)
    drafter.load_zlab_state({k: v.to(target.dtype) for k, v in tensors.items()})
    drafter.eval()
    drafter.name = Path(path_or_hub_id.rstrip("/")).name
    drafter.measured = measured_acceptance(path, cfg.block_size)
    drafter.bind(target, target.max_context)
    vocab = read_vocab(path)
    if vocab is not None:  # trained here over the tokens its target writes most (vocab.py)
        drafter.use_vocab(vocab)
    return drafter


def read_config(path: Path) -> DFlashConfig:
    """The config.json of a drafter's folder (z-lab's format)."""
    if not (path / "config.json").is_file():
        raise EngineError(f"{path} has no config.json: not a DFlash drafter directory")
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise EngineError(f"cannot read {path / 'config.json'}: {err}") from None
    return DFlashConfig.from_zlab(raw)


def cached_drafter_dir(model_name: str) -> Path:
    """Where `specchat train-dflash` keeps the drafter it trains for a pack: <cache>/<pack>/dflash."""
    return cache_root() / model_name / "dflash"


def find_cached_drafter(target) -> str | None:
    """The drafter trained for this target's pack, when the cache holds one."""
    if target.name not in PACKS:
        return None
    folder = cached_drafter_dir(target.name)
    return str(folder) if (folder / "config.json").is_file() and any(folder.glob("*.safetensors")) else None


def check_fits(cfg: DFlashConfig, target) -> None:
    t, s = target.config, cfg.shape
    if s.hidden_size != t.hidden_size:
        raise EngineError(
            f"drafter hidden size {s.hidden_size} != target {target.name}'s {t.hidden_size}: "
            "the drafter was trained for another model"
        )
    if s.vocab_size != t.vocab_size:
        raise EngineError(
            f"drafter vocabulary of {s.vocab_size} != target {target.name}'s {t.vocab_size}: "
            "the drafter was trained for another model"
        )
    if cfg.num_target_layers != t.num_layers:
        raise EngineError(
            f"drafter reads a {cfg.num_target_layers}-layer target, {target.name} has "
            f"{t.num_layers} layers: the drafter was trained for another model"
        )
    if not all(0 <= i < t.num_layers for i in cfg.target_layer_ids):
        raise EngineError(
            f"drafter target_layer_ids {list(cfg.target_layer_ids)} are not layers of {target.name}"
        )
    if not 0 <= cfg.mask_token_id < t.vocab_size:
        raise EngineError(f"drafter mask_token_id {cfg.mask_token_id} is outside the vocabulary")
    if not 2 <= cfg.block_size <= 16:
        raise EngineError(f"drafter block_size {cfg.block_size}: specchat verifies blocks of 2 to 16 tokens")


FEATURE_LAYERS = 5  # target layers a drafter reads, whatever its own depth (z-lab's and SpecForge's five)


def drafter_config(target, num_layers: int = 5, block_size: int = 16, mask_token_id: int | None = None
                   ) -> DFlashConfig:
    """A drafter shaped like z-lab's for `target`: layers of the target's width, reading five
    distinct target layers (z-lab's rule for five where the target is deep enough for it: 1, 7, 13,
    19, 25 of 28), however many layers it has itself, since a shallower drafter needs what the
    target knows no less; the mask token is the last vocabulary row unless given (Qwen
    vocabularies end in rows no text uses)."""
    t = target.config
    return DFlashConfig.from_zlab(
        {
            "block_size": block_size,
            "num_target_layers": t.num_layers,
            "dflash_config": {
                "mask_token_id": t.vocab_size - 1 if mask_token_id is None else mask_token_id,
                "target_layer_ids": distinct_target_layer_ids(t.num_layers, FEATURE_LAYERS),
            },
            "num_hidden_layers": num_layers,
            "hidden_size": t.hidden_size,
            "intermediate_size": t.intermediate_size,
            "num_attention_heads": t.num_heads,
            "num_key_value_heads": t.num_kv_heads,
            "head_dim": t.head_dim,
            "rope_theta": t.rope_theta,
            "rms_norm_eps": t.rms_norm_eps,
            "vocab_size": t.vocab_size,
        }
    )


def save_drafter(drafter: DFlashDrafter, directory: str | Path, dtype: torch.dtype = torch.bfloat16,
                 feature_scale: torch.Tensor | None = None, vocab: list[int] | None = None) -> Path:
    """Write a drafter in z-lab's format: config.json and model.safetensors under z-lab's names
    (what `load_drafter`, z-lab's model class, vLLM and SGLang read). The file is written under
    another name and renamed, so a reader never finds half of it.

    feature_scale [n * H], in fc's input order: a drafter trained on the target's states divided
    by it is written with fc's columns divided by it, so it reads the raw states as every
    loader gives them and computes the same function.

    vocab: the token ids it drafts over, when fewer than the target's (draft_vocab.json beside
    z-lab's files, which z-lab's loaders do not read)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = drafter.zlab_state()
    if feature_scale is not None:
        state["fc.weight"] = state["fc.weight"].float() / feature_scale.to(state["fc.weight"].device)[None, :]
    tensors = {k: v.to(dtype) for k, v in state.items()}
    save_file(tensors, str(directory / "model.safetensors.partial"))
    os.replace(directory / "model.safetensors.partial", directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps(drafter.config.to_zlab(), indent=2))
    if vocab is not None:
        write_vocab(directory, vocab)
    return directory


def write_random_drafter(
    directory: str | Path,
    target,
    num_layers: int = 5,
    block_size: int = 16,
    mask_token_id: int | None = None,
    seed: int = 0,
    std: float = 0.02,
    draft_vocab: int = 0,
) -> Path:
    """Write a random-weight drafter for `target` in z-lab's format (config.json + model.safetensors).

    Its drafts are noise: it shows that the DFlash path runs and what a pass costs, never how
    well DFlash drafts. Layer shapes follow the target's, as z-lab's drafters do; it reads
    distinct target layers, by z-lab's rule where the target is deep enough for it. With
    `draft_vocab` N it drafts over N of the target's tokens (draft_vocab.json, as train-dflash
    writes by default; the first N ids: a pass costs the same whichever they are)."""
    from safetensors.torch import save_file

    cfg = drafter_config(target, num_layers, block_size, mask_token_id)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in zlab_weight_shapes(cfg).items():
        mean, spread = (1.0, 0.1) if "norm" in name else (0.0, std)
        tensors[name] = (mean + spread * torch.randn(shape, generator=gen)).contiguous()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(cfg.to_zlab(), indent=2))
    save_file(tensors, str(directory / "model.safetensors"))
    if draft_vocab:
        write_vocab(directory, list(range(min(draft_vocab, target.config.vocab_size))))
    return directory
