"""GPU tests: marked ``gpu`` and skipped where CUDA is not available.

Run them on a CUDA machine with ``python -m pytest -m gpu tests/gpu``; on the
CPU-only CI they are collected and reported as skipped.
"""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)
