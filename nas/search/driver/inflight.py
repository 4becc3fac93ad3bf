"""What the search driver keeps of its trials in flight, and the worker pool it runs them on."""

from __future__ import annotations

import dataclasses

from optuna.trial import Trial

from nas.execution.payload import TrialPayload
from nas.execution.pool import Pool
from nas.models import ArchConfig
from nas.models.cost import Compute
from nas.search.driver.context import RunContext


@dataclasses.dataclass
class Running:
    """A trial a worker has (or will have again: a retry), with what its attempts met."""

    trial: Trial
    payload: TrialPayload
    arch_id: str
    started: float
    attempts: int = 1
    errors: list[str] = dataclasses.field(default_factory=list)  # why earlier attempts had no result
    alone: bool = False  # ran out of GPU memory while sharing a GPU: retried with the GPU to itself
    work: float = 1.0  # its cost relative to the run's other trials (for the time left)


@dataclasses.dataclass
class Waiting:
    """A trial proposed while a worker trains its architecture: trained only if that result cannot serve."""

    trial: Trial
    arch: ArchConfig
    cost: Compute


def default_pool(run: RunContext) -> Pool:
    """The pool ``run`` asks for: Ray actors, or the driver's own process with ``--local``."""
    r = run.spec.resources
    if r.local:
        from nas.execution.local_pool import LocalPool

        return LocalPool(threads=max(1, int(r.cpus_per_trial)))
    from nas.execution.ray_pool import RayPool

    return RayPool(
        run.workers,
        cpus_per_trial=r.cpus_per_trial,
        gpus_per_trial=r.gpus_per_trial,
        address=r.address,
        dashboard=r.dashboard,
        start_timeout=r.worker_timeout,
        trial_timeout=r.trial_timeout,
    )
