"""Requests the machine cannot meet are refused before anything exists (nas.preflight.check_devices)."""

from __future__ import annotations

import pytest
import torch

from nas.errors import UserError
from nas.preflight import check_devices


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine, seen as one with a single CUDA GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_a_gpu_count_over_the_machines_is_refused(one_gpu):
    check_devices("auto", 1.0, on_ray=True, this_machine=True)
    check_devices("auto", 0.25, on_ray=True, this_machine=True)
    with pytest.raises(UserError, match=r"gpus_per_trial.* 2: this machine has 1 GPU"):
        check_devices("auto", 2.0, on_ray=True, this_machine=True)


def test_cuda_on_ray_workers_needs_a_gpu_per_trial(one_gpu):
    # Ray gives a worker without a GPU an empty CUDA_VISIBLE_DEVICES: every trial would fail
    with pytest.raises(UserError, match="Ray workers see only the GPUs they are given"):
        check_devices("cuda", 0.0, on_ray=True, this_machine=True)
    check_devices("cuda", 1.0, on_ray=True, this_machine=True)
    check_devices("cuda", 0.0, on_ray=False, this_machine=True)  # --local: this process has the GPU


def test_a_joined_cluster_is_not_judged_by_this_machine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    check_devices("cuda", 1.0, on_ray=True, this_machine=False)  # the cluster's GPUs: checked once joined
    with pytest.raises(UserError, match="CUDA is not available"):
        check_devices("cuda", 0.0, on_ray=False, this_machine=True)
    check_devices("auto", 0.0, on_ray=True, this_machine=True)  # auto never asks for what is not there
