"""Which launches a step's kernels take (engine/kernels/overlap.py), decided without a GPU."""

import pytest
import torch

from engine.kernels import overlap

CUDA = torch.device("cuda")


@pytest.mark.parametrize("setting,decode,verify", [("1", True, True), ("decode", True, False)])
def test_dependent_launch_for_every_step_or_decode_steps_only(setting, decode, verify, monkeypatch):
    monkeypatch.setattr(overlap, "dependent_launch", lambda device: True)  # a Hopper GPU
    monkeypatch.setenv("SPECCHAT_PDL", setting)
    assert overlap.launch_options(CUDA, 1) == ({"GDC": True, "launch_pdl": True} if decode else {"GDC": False})
    assert overlap.launch_options(CUDA, 16) == ({"GDC": True, "launch_pdl": True} if verify else {"GDC": False})


def test_no_dependent_launch_off_the_gpu():
    assert overlap.launch_options(torch.device("cpu"), 1) == {"GDC": False}


@pytest.mark.parametrize("skip,plain", [(None, {"attention"}), ("", set()), ("attention,ops", {"attention", "ops"})])
def test_longer_steps_launch_the_named_kinds_plainly_attention_by_default(skip, plain, monkeypatch):
    monkeypatch.setattr(overlap, "dependent_launch", lambda device: True)
    monkeypatch.delenv("SPECCHAT_PDL", raising=False)
    if skip is None:
        monkeypatch.delenv("SPECCHAT_PDL_SKIP", raising=False)
    else:
        monkeypatch.setenv("SPECCHAT_PDL_SKIP", skip)
    dependent = {"GDC": True, "launch_pdl": True}
    for kind in ("attention", "gemm16", "ops"):
        assert overlap.launch_options(CUDA, 1, kind) == dependent  # decode steps: every kind
        assert overlap.launch_options(CUDA, 16, kind) == ({"GDC": False} if kind in plain else dependent)
