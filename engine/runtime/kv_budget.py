"""How long a context a model may be given: no longer than the positions it was trained for, and no
more KV cache than the device has memory free for (asked before the pool is allocated, so a typo
such as 99,999,999 tokens is one line, not an allocation that fails or swaps the machine to death)."""

from __future__ import annotations

import torch

from engine.errors import EngineError
from engine.network.config import ModelConfig

DEFAULT_CONTEXT = 4096  # tokens, unless the model has fewer positions
MIN_CONTEXT = 32
HEADROOM = 0.9  # of the free memory: the steps' activations and the allocator need the rest


def default_context(config: ModelConfig) -> int:
    return min(DEFAULT_CONTEXT, config.max_position)


def kv_pool_bytes(config: ModelConfig, tokens: int, dtype: torch.dtype) -> int:
    """Bytes of K and V for `tokens` positions of every layer."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * config.num_layers * tokens * config.num_kv_heads * config.head_dim * itemsize


def free_memory(device: torch.device) -> int | None:
    """Bytes the device can still give (None: unknown)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def check_context(name: str, config: ModelConfig, max_context: int, pool_tokens: int, dtype, device) -> None:
    """EngineError, in one line, when max_context is out of the model's range or the memory's."""
    if not MIN_CONTEXT <= max_context <= config.max_position:
        raise EngineError(
            f"--max-context must be from {MIN_CONTEXT} to {config.max_position:,} (the positions {name} "
            f"was trained for), got {max_context:,}"
        )
    need, free = kv_pool_bytes(config, pool_tokens, dtype), free_memory(device)
    if free is not None and need > HEADROOM * free:
        raise EngineError(
            f"--max-context {max_context:,} needs {gib(need)} of KV cache and {device.type} has {gib(free)} "
            f"free: give at most about {int(max_context * HEADROOM * free / need):,}"
        )


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"
