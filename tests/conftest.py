"""Shared fixtures: the corpus cache directory, a small synthetic corpus, single-threaded torch.

``NAS_CACHE_DIR`` points at one directory under the user's cache (not a
temporary one), so the real default corpus is downloaded once per machine, not
once per test session; a value already in the environment wins (CI can point
it at its own cache).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from synthetic_text import write_corpus

os.environ.setdefault("NAS_CACHE_DIR", str(Path.home() / ".cache" / "nas-lm-tests"))


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of 12 synthetic documents (~4 KB each); document 5 is the validation one."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), 12)


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in this process during the test, as in a terminal: a suite started
    in the background (``cmd &`` in a script) inherits SIGINT ignored, and Python then installs no handler."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def single_thread() -> Iterator[None]:
    """Tiny tensors train faster on one thread (a second one only adds synchronisation)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that uses the shared Ray cluster is ``slow``: ``pytest -m "not slow"`` is the quick loop."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
