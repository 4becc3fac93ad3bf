"""Ray workers: one actor per concurrent trial.  The only module that imports Ray.

Actors (rather than tasks) keep torch imported and the corpus loaded between
trials, which saves seconds per trial.  An actor that dies is restarted by Ray
(``max_restarts=-1``); the driver decides whether the trial it was running is
retried.  Ray Tune is not used: measured in DESIGN.md, Tune + OptunaSearch
costs 0.24 to 2.6 s per trial against ~0.03 s for this ask-and-tell loop, and
it records early-stopped trials as complete.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from nas.errors import UserError


@ray.remote(max_restarts=-1, max_task_retries=0)
class TrialActor:
    def __init__(self, threads: int) -> None:
        import torch

        torch.set_num_threads(max(1, threads))
        self.threads = threads

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        from nas.execution.worker import run_trial

        result = run_trial(payload)
        result["node"] = ray.get_runtime_context().get_node_id()
        return result


@dataclasses.dataclass
class Finished:
    """A trial's outcome as the pool saw it: the worker's result, or the reason there is none."""

    tag: Any
    result: dict[str, Any] | None
    error: str | None = None  # the worker (process or node) died


class RayPool:
    """Runs payloads on ``n_workers`` actors; ``submit`` / ``wait`` drive it."""

    def __init__(
        self,
        n_workers: int,
        cpus_per_trial: float = 1.0,
        gpus_per_trial: float = 0.0,
        address: str | None = None,
        dashboard: bool = False,
    ) -> None:
        self.started_ray = False
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                else:
                    # Local Ray: loopback only, and no dashboard unless asked.
                    need = max(os.cpu_count() or 1, int(n_workers * cpus_per_trial + 0.999))
                    ray.init(
                        address="local",  # never attach to some other Ray found on this machine
                        num_cpus=need,
                        include_dashboard=dashboard,
                        _node_ip_address="127.0.0.1",
                        logging_level=logging.WARNING,
                        log_to_driver=False,
                    )
            except (ConnectionError, RayError, ValueError, RuntimeError) as err:
                raise UserError(f"--address {address!r}: cannot connect to Ray: {err}".splitlines()[0]) from None
            self.started_ray = True
        self.actors = [
            TrialActor.options(num_cpus=cpus_per_trial, num_gpus=gpus_per_trial).remote(
                max(1, int(cpus_per_trial))
            )
            for _ in range(n_workers)
        ]
        self.idle = list(range(n_workers))
        self.running: dict[Any, tuple[int, Any]] = {}  # ObjectRef -> (actor index, tag)

    def has_idle(self) -> bool:
        return bool(self.idle)

    @property
    def n_running(self) -> int:
        return len(self.running)

    def submit(self, tag: Any, payload: dict[str, Any]) -> None:
        i = self.idle.pop(0)
        ref = self.actors[i].run.remote(payload)
        self.running[ref] = (i, tag)

    def wait(self, timeout: float) -> list[Finished]:
        if not self.running:
            return []
        ready, _ = ray.wait(list(self.running), num_returns=len(self.running), timeout=timeout)
        out = []
        for ref in ready:
            i, tag = self.running.pop(ref)
            self.idle.append(i)
            try:
                out.append(Finished(tag, ray.get(ref)))
            except RayTaskError as err:  # the worker function raised (it catches candidate faults)
                out.append(Finished(tag, None, f"worker error: {err}".splitlines()[0]))
            except (RayActorError, GetTimeoutError, RayError) as err:
                out.append(Finished(tag, None, f"worker died: {type(err).__name__}"))
        return out

    def worker_pids(self) -> list[int]:
        return [ray.get(a.pid.remote(), timeout=60) for a in self.actors]

    def shutdown(self) -> None:
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except RayError:
                pass
        self.actors = []
        if self.started_ray:
            ray.shutdown()
