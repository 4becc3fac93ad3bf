"""Requests the machine cannot meet are refused before anything exists (nas.preflight.check_devices,
and the memory one trial gets: nas.preflight.machine_memory)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from nas.errors import UserError
from nas.models.cost import training_bytes
from nas.preflight import check_devices, machine_memory
from nas.search.driver.context import RunContext
from nas.search.space.combinations import one_layer_archs
from nas.search.space.load import load_spec

TINY_SPACE = Path(__file__).parent / "search" / "tiny_space.yaml"


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


GIB = 2**30


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine, seen as one with an 80 GiB GPU 0 and a 40 GiB GPU 1."""
    sizes = [80 * GIB, 40 * GIB]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=sizes[i]))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"GPU{i}")


def test_machine_memory_is_the_device_and_share_a_trial_trains_on(two_gpus):
    ram = machine_memory("cpu")
    assert ram[1] == "this machine's memory"
    assert machine_memory("auto") == machine_memory("cuda") == (80 * GIB, "the GPU (GPU0)")
    assert machine_memory("cuda:1") == (40 * GIB, "the GPU (GPU1)")  # not the machine's RAM
    # Ray workers: without a GPU they train on the CPU, whatever --device auto finds here
    assert machine_memory("auto", gpus_per_trial=0.0) == ram
    assert machine_memory("auto", gpus_per_trial=2.0) == (40 * GIB, "the smallest GPU (GPU1)")
    quarter = (10 * GIB, "a 0.25 share of the smallest GPU (GPU1)")
    assert machine_memory("auto", gpus_per_trial=0.25) == quarter
    with pytest.raises(UserError, match=r"'cuda:2': this machine has 2 GPU\(s\); valid: cuda:0 to cuda:1"):
        machine_memory("cuda:2")


def test_a_search_sharing_a_gpu_is_refused_a_candidate_over_its_share(tmp_path, monkeypatch):
    # The tiny space's largest candidate fits one GPU of twice its need, not a quarter of it.
    spec, space = load_spec(TINY_SPACE)
    need = max(
        sum(training_bytes(arch, spec.recipe.batch_size, arch.max_len, n).values())
        for arch, n, _ in one_layer_archs(space, largest=True)
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=2 * need))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "GPU0")
    monkeypatch.delitem(sys.modules, "ray", raising=False)  # not a Ray another test started: this machine's
    corpus = tmp_path / "a.txt"
    corpus.write_text("some words " * 200)

    def check(gpus: float) -> None:
        spec2 = spec.replace(resources={"gpus_per_trial": gpus})
        RunContext(spec2, space, study="s", storage="sqlite:///s.db", data=str(corpus)).check_environment()

    check(1.0)
    with pytest.raises(UserError, match="over the .* GiB a 0.25 share of the GPU .GPU0. can hold"):
        check(0.25)
