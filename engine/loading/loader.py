"""load_model: a pack name, a local HF directory, a GGUF file or a hub id -> a runnable Model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from engine.errors import EngineError
from engine.loading import packs
from engine.loading.gguf_file import read_gguf
from engine.loading.tokenizer import load_tokenizer
from engine.network.config import DTYPES, ModelConfig
from engine.network.decoder import Decoder
from engine.runtime.kv_budget import default_context
from engine.runtime.model import Model


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str | torch.device) -> str | torch.device:
    """The device if this machine has it: cpu, cuda or cuda:N."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda"):
        raise EngineError(f"unknown device {str(device)!r}: use cpu, cuda or cuda:N")
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise EngineError("CUDA was asked for but no GPU is available here (use --device cpu)")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise EngineError(f"no GPU {parsed}: this machine has {torch.cuda.device_count()}")
    return device


def resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    if dtype not in DTYPES:
        raise EngineError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def load_model(
    name_or_path: str,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    max_context: int | None = None,
    progress=None,
    eager: bool = False,
    batch_invariant: bool = False,
) -> Model:
    """Load a model by pack name (`smollm2-135m`), local HF directory, GGUF file or hub id.

    device defaults to CUDA when present; dtype to bfloat16 on CUDA and float32 on CPU;
    max_context defaults to 4096 tokens, or the model's positions if fewer; eager=True
    runs CUDA steps op by op instead of replaying CUDA graphs; batch_invariant=True makes a bf16
    reply with speculation plain decoding's bit for bit on CUDA, at some cost to decode steps."""
    device = check_device(device or default_device())
    dtype = resolve_dtype(dtype, device)
    path = Path(os.path.expanduser(name_or_path))
    if name_or_path in packs.PACKS:
        path = packs.ensure(name_or_path, progress=progress)
    elif not path.exists():
        if looks_like_hub_id(name_or_path):
            path = hub_snapshot(name_or_path)
        else:
            raise EngineError(
                f"no model {name_or_path!r}: not a file or directory, not a pack "
                f"({', '.join(packs.PACKS)}), not a hub id (owner/name)"
            )
    config, tensors, tokenizer = read_weights(path, progress)
    with torch.device("meta"):
        decoder = Decoder(config)
    decoder = decoder.to_empty(device=device).to(dtype)
    if config.tie_word_embeddings:  # to_empty gives each module its own new tensor: tie again
        decoder.lm_head.weight = decoder.embed_tokens.weight
    decoder.load_hf_state({k: v.to(dtype) for k, v in tensors.items()})
    decoder.eval()
    max_context = default_context(config) if max_context is None else max_context
    return Model(decoder, config, tokenizer, name=model_name(name_or_path), max_context=max_context, eager=eager,
                 batch_invariant=batch_invariant)


def model_name(name_or_path: str) -> str:
    return Path(name_or_path.rstrip("/")).name.removesuffix(".gguf")


def looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))


def hub_snapshot(repo_id: str) -> Path:
    """Download (or find in the local cache) a hub repository's config, tokenizer and safetensors."""
    from huggingface_hub import snapshot_download  # slow to import: only for a hub id

    patterns = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt"]
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except Exception as err:  # noqa: BLE001 - offline, unknown repo, gated, network: one line each
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
        why = "offline (HF_HUB_OFFLINE) and not in the local cache" if offline else type(err).__name__
        raise EngineError(f"cannot get {repo_id!r} from the hub: {why}") from None


def read_weights(path: Path, progress=None) -> tuple[ModelConfig, dict[str, torch.Tensor], object]:
    """Config, HF-named tensors and tokenizer from a GGUF file or an HF-style directory."""
    if path.is_file():
        if path.suffix != ".gguf":
            raise EngineError(f"{path} is not a GGUF file or a model directory")
        return read_gguf(path, progress)
    return read_hf_dir(path)


def read_hf_dir(path: Path) -> tuple[ModelConfig, dict[str, torch.Tensor], object]:
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise EngineError(f"{path} has no config.json: not a Hugging Face model directory")
    config = ModelConfig.from_json(cfg_file)
    return config, read_safetensors(path), load_tokenizer(path)


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a directory's safetensors files (sharded through an index, or not)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise EngineError(f"{path} holds no .safetensors weights")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        try:
            tensors.update(load_file(str(path / name)))
        except (OSError, SafetensorError) as err:
            raise EngineError(f"cannot read {path / name}: {err}") from None
    return tensors
