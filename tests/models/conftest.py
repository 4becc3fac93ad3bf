"""Fixtures of the model tests: ``variant`` runs a test over every block variant.

The variants are listed in ``model_cases.py``: every registered attention
block with its default options plus a few option variants, so registering a
new block gives it the whole contract suite.  ``activation`` runs a test over
every registered FFN activation.

The tensors here are tiny, where a second intra-op thread only adds
synchronisation (and, on a busy two-core machine, slows a forward pass a
hundredfold), so each model test runs single-threaded.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from model_cases import VARIANTS, Variant

import nas


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=list(VARIANTS), ids=str)
def variant(request: pytest.FixtureRequest) -> Variant:
    return VARIANTS[request.param]


@pytest.fixture(params=nas.ACTIVATIONS.names(), ids=str)
def activation(request: pytest.FixtureRequest) -> str:
    return request.param
