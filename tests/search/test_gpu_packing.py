"""GPU placement on the shared Ray cluster, with a node that advertises a fake GPU (no CUDA needed).

Ray hands fractional-GPU actors on one GPU the same GPU id and sets their
CUDA_VISIBLE_DEVICES to it; whether a CUDA device exists behind it does not
matter to placement, so packing and the exclusive retry are tested here with
the ``sleep:S`` evaluator.  tests/gpu runs real trials on a real GPU.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from nas.errors import UserError
from nas.execution.pool import Finished

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ARCH = {"d_model": 16, "n_heads": 2, "max_len": 16, "layers": {"repeat": 1, "attention": "mha"}}


def sleep_payload(seconds: float) -> dict[str, Any]:
    return {
        "arch": ARCH,
        "recipe": {"batch_size": 2},
        "budget": {"steps": 1},
        "data": None,
        "hurdles": [],
        "thresholds": {},
        "logdir": None,
        "hparams": {},
        "spec": {"search": {"evaluator": f"sleep:{seconds}"}, "resources": {"device": "cpu"}},
    }


@pytest.fixture
def gpu_node(ray_cluster: Any) -> Iterator[Any]:
    """A node with no CPU and one (fake) GPU, so only GPU trials land on it; removed afterwards."""
    import ray

    node = ray_cluster.add_node(num_cpus=0, num_gpus=1)
    ray_cluster.wait_for_nodes()
    while ray.cluster_resources().get("GPU", 0) < 1:
        time.sleep(0.1)
    yield node
    ray_cluster.remove_node(node)


def pool_with_workers_up(n: int) -> Any:
    from nas.execution.ray_pool import RayPool

    pool = RayPool(n, cpus_per_trial=0, gpus_per_trial=1 / n)
    while len(pool.worker_pids()) < n:  # every actor has started and said which GPU it has
        assert pool.wait(timeout=0.5) == []
    return pool


def collect(pool: Any, n: int) -> dict[Any, dict[str, Any]]:
    done: list[Finished] = []
    while len(done) < n:
        done += pool.wait(timeout=1.0)
    assert all(f.error is None for f in done), [f.error for f in done]
    return {f.tag: f.result for f in done}


def test_four_trials_share_one_gpu(gpu_node: Any) -> None:
    pool = pool_with_workers_up(4)
    try:
        for tag in range(4):
            assert pool.has_idle()
            pool.submit(tag, sleep_payload(3))
        assert not pool.has_idle()
        results = collect(pool, 4)
    finally:
        pool.shutdown()
    assert all(r["status"] == "ok" for r in results.values())
    assert {tuple(r["gpus"]) for r in results.values()} == {("0",)}  # one GPU, the same id for all
    assert len({r["pid"] for r in results.values()}) == 4  # four worker processes
    # all four ran at once: the last to start started before the first to finish finished
    assert max(r["started_at"] for r in results.values()) < min(r["finished_at"] for r in results.values())


def test_an_exclusive_trial_waits_for_the_gpu_to_empty_and_keeps_it(gpu_node: Any) -> None:
    pool = pool_with_workers_up(4)
    try:
        for tag in range(3):
            pool.submit(tag, sleep_payload(2))
        pool.submit("alone", sleep_payload(0.5), exclusive=True)
        assert not pool.has_idle()  # the fourth slot is held for the exclusive trial, not given work
        results = collect(pool, 4)
        assert pool.has_idle()  # released once it ended
    finally:
        pool.shutdown()
    alone = results.pop("alone")
    assert alone["status"] == "ok" and alone["gpus"] == ["0"]
    assert alone["started_at"] >= max(r["finished_at"] for r in results.values())


def test_gpus_the_cluster_does_not_have_are_refused_at_once(ray_cluster: Any) -> None:
    from nas.execution.ray_pool import RayPool

    with pytest.raises(UserError, match=r"--gpus-per-trial 1: the Ray cluster has 0 GPU"):
        RayPool(1, gpus_per_trial=1)
