"""One Ray for the whole test session: a two-node cluster simulated on this machine.

``ray.init`` costs seconds and an idle Ray holds about 0.8 GB, so every search
test shares this one; each node has one CPU, so two concurrent trials land on
different nodes.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory):
    """A directory of small generated documents (real text is for the evaluator's own e2e test)."""
    root = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    words = "the king and queen of a castle went to see what every lord would say in spring".split()
    for i in range(6):
        text = "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(300))
        (root / f"doc{i}.txt").write_text(text)
    return root


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """One short line of text, repeated: enough for proxy-evaluated searches (test files may override it)."""
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join("the king and queen went to see what every lord would say" for _ in range(300)))
    return path
