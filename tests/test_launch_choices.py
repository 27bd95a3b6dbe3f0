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
