"""Ray workers: one actor per concurrent trial.  The only module that imports Ray.

Actors (rather than tasks) keep torch imported and the corpus loaded between
trials, which saves seconds per trial.  Ray Tune is not used: measured in
DESIGN.md, Tune + OptunaSearch costs 0.24 to 2.6 s per trial against ~0.03 s
for this ask-and-tell loop, and it records early-stopped trials as complete.

Failures (see docs/reliability.md):

* A worker process that dies mid-trial (killed, crashed, its node lost) ends
  that trial with ``Finished(result=None, error="worker died: ...")``; the
  driver decides whether to run it again.  Ray restarts the actor
  (``max_restarts=-1``); the pool gives the slot no work until the restarted
  actor has answered.
* Before each trial the pool sends the actor a tiny ``whoami`` call, answered
  just before the trial starts.  A slot whose actor has not answered within
  ``start_timeout`` seconds (it cannot be placed: its node is gone and no
  other node has room, or the cluster never had room for it) is given up:
  the actor is killed, the trial it held comes back as failed-to-start, and
  the search carries on with fewer workers.  With none left, ``wait`` raises
  :class:`~nas.execution.pool.NoWorkersLeft`.
* A trial running longer than ``trial_timeout`` seconds (a hung data read, a
  deadlock: nothing that dies by itself) has its actor killed and restarted;
  the trial comes back failed with ``retry=False``.  Ray has no timeout for an
  actor call that is already running (``ray.cancel`` does not interrupt a
  running actor task), so the pool keeps the clock.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Any

from nas.errors import UserError
from nas.execution.pool import Finished, NoWorkersLeft

__all__ = ["Finished", "NoWorkersLeft", "RayPool"]

#: Ray's switch for single-node operation (meant for Windows and macOS); see ``_import_ray``.
_SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: how many failed ``whoami`` calls in a row a (re)starting actor may give before its slot is dropped
_PROBE_RETRIES = 5


def _import_ray(local: bool) -> Any:
    """Import Ray; before a local Ray's first import, ask it to stay on the loopback interface.

    ``ray.init(_node_ip_address="127.0.0.1")`` alone does not do it: Ray rewrites a
    loopback address to the machine's reachable one (``resolve_ip_for_localhost``),
    and its servers then listen on every interface.  With Ray's single-node switch
    off at import time, the node address stays 127.0.0.1 and the GCS, raylet,
    workers and agents listen on loopback only (checked with ``ss -ltnp``; see
    docs/reliability.md).  Joining a cluster (``--address``) leaves Ray as it is.
    """
    if local and "ray" not in sys.modules and _SINGLE_NODE_ENV not in os.environ:
        os.environ[_SINGLE_NODE_ENV] = "0"
        try:
            import ray
        finally:
            del os.environ[_SINGLE_NODE_ENV]
    import ray
    import ray.exceptions
    import ray.util

    return ray


class TrialActor:
    """One worker process; keeps torch and the corpus loaded between trials."""

    def __init__(self, threads: int) -> None:
        import torch

        torch.set_num_threads(max(1, threads))
        self.threads = threads

    def whoami(self) -> tuple[int, str]:
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        import ray

        from nas.execution.worker import run_trial

        result = run_trial(payload)
        result["node"] = ray.get_runtime_context().get_node_id()
        return result


_ACTOR_CLASS: Any = None


def _actor_class(ray: Any) -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = ray.remote(max_restarts=-1, max_task_retries=0)(TrialActor)
    return _ACTOR_CLASS


@dataclasses.dataclass
class _Slot:
    """One actor and what the pool knows about it."""

    actor: Any
    probe: Any = None  # ObjectRef of a whoami() not answered yet (the actor is starting or about to run)
    since: float = 0.0  # when ``probe`` was sent
    pid: int | None = None
    node: str | None = None
    ref: Any = None  # ObjectRef of the running trial
    tag: Any = None
    started: float = 0.0  # when the trial started (the actor answered the probe sent with it)
    restarting: bool = False  # died; gets no work until the restarted actor answers
    unavailable: int = 0  # failed whoami calls in a row


class RayPool:
    """Runs payloads on ``n_workers`` actors; ``submit`` / ``wait`` drive it."""

    def __init__(
        self,
        n_workers: int,
        cpus_per_trial: float = 1.0,
        gpus_per_trial: float = 0.0,
        address: str | None = None,
        dashboard: bool = False,
        start_timeout: float = 300.0,
        trial_timeout: float | None = None,
    ) -> None:
        ray = self.ray = _import_ray(local=address is None)
        self.start_timeout = float(start_timeout)
        self.trial_timeout = trial_timeout
        self.started_ray = False
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                else:
                    # Local Ray: loopback only (see _import_ray), no dashboard unless asked, and never
                    # attached to some other Ray found on this machine (address="local").
                    need = max(os.cpu_count() or 1, int(n_workers * cpus_per_trial + 0.999))
                    ray.init(
                        address="local",
                        num_cpus=need,
                        include_dashboard=dashboard,
                        _node_ip_address="127.0.0.1",
                        logging_level=logging.WARNING,
                        log_to_driver=False,
                    )
            except (ConnectionError, ray.exceptions.RayError, ValueError, RuntimeError) as err:
                first = f"{err}".splitlines()[0] if str(err) else type(err).__name__
                raise UserError(f"--address {address!r}: cannot connect to Ray: {first}") from None
            self.started_ray = True
        self.node_ip = ray.util.get_node_ip_address()
        actor_cls = _actor_class(ray).options(num_cpus=cpus_per_trial, num_gpus=gpus_per_trial)
        self.slots: list[_Slot] = []
        for _ in range(n_workers):
            slot = _Slot(actor_cls.remote(max(1, int(cpus_per_trial))))
            self._probe(slot)
            self.slots.append(slot)
        self.n_workers = n_workers
        self.deaths = 0  # trials whose worker died under them
        self.given_up = 0  # slots dropped because their actor could not be (re)started

    # -- the pool interface -------------------------------------------------------------------
    def has_idle(self) -> bool:
        return any(self._idle(s) for s in self.slots)

    @property
    def n_running(self) -> int:
        return sum(s.ref is not None for s in self.slots)

    def submit(self, tag: Any, payload: dict[str, Any]) -> None:
        idle = [s for s in self.slots if self._idle(s)]
        if not idle:
            raise RuntimeError("no idle worker; check has_idle() first")
        slot = min(idle, key=lambda s: s.probe is not None)  # an actor known to be up first
        if slot.probe is None:
            self._probe(slot)  # answered just before the trial starts: says the actor is up, and its pid
        slot.ref, slot.tag = slot.actor.run.remote(payload), tag
        slot.started = time.monotonic()  # reset when the probe is answered, if it is still out

    def wait(self, timeout: float) -> list[Finished]:
        """Trials finished within ``timeout`` s; also notices restarted and stuck actors."""
        if not self.slots:
            raise NoWorkersLeft(self._gone_message())
        ray = self.ray
        refs = [s.probe for s in self.slots if s.probe is not None]
        refs += [s.ref for s in self.slots if s.ref is not None]
        out: list[Finished] = []
        if refs:
            ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
            if ready:  # collect everything else that is ready too, without waiting
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            done = set(ready)
            for slot in list(self.slots):
                if slot.probe is not None and slot.probe in done:
                    out += self._answered(slot)
                if slot.ref is not None and slot.ref in done:
                    out.append(self._finished(slot))
        now = time.monotonic()
        for slot in list(self.slots):
            if slot.probe is not None and now - slot.since > self.start_timeout:
                out += self._give_up(slot, f"worker not (re)started within {self.start_timeout:g} s "
                                           "(no room for it in the Ray cluster?)")
            elif (self.trial_timeout is not None and slot.ref is not None and slot.probe is None
                  and now - slot.started > self.trial_timeout):
                out.append(self._time_out(slot))
        return out

    def shutdown(self) -> None:
        for slot in self.slots:
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead or Ray going away: nothing left to stop
                pass
        self.slots = []
        if self.started_ray:
            self.ray.shutdown()

    # -- introspection (tests, benchmarks/chaos.py) ------------------------------------------
    def busy_workers(self) -> list[tuple[int, str]]:
        """(PID, node id) of the worker processes running a trial right now (that have started it)."""
        slots = list(self.slots)  # a snapshot: a watching thread may call this while the driver runs
        return [(s.pid, s.node or "") for s in slots if s.ref is not None and s.probe is None and s.pid]

    def busy_pids(self) -> list[int]:
        """PIDs of the worker processes running a trial right now (that have started it)."""
        return [pid for pid, _ in self.busy_workers()]

    def worker_pids(self) -> list[int]:
        """PIDs of the workers known to be up."""
        return [s.pid for s in list(self.slots) if s.probe is None and s.pid]

    @property
    def size(self) -> int:
        """Workers the pool still has (started, starting or restarting)."""
        return len(self.slots)

    # -- internals ----------------------------------------------------------------------------
    @staticmethod
    def _idle(slot: _Slot) -> bool:
        return slot.ref is None and not slot.restarting

    def _probe(self, slot: _Slot) -> None:
        slot.probe = slot.actor.whoami.remote()
        slot.since = time.monotonic()

    def _answered(self, slot: _Slot) -> list[Finished]:
        try:
            slot.pid, slot.node = self.ray.get(slot.probe, timeout=60)
        except self.ray.exceptions.RayError:
            # Restarting (a call queued to the old process fails) or dead for good (it failed in
            # __init__): ask again a few times, then drop the slot.  The timeout counts from the first ask.
            slot.unavailable += 1
            if slot.unavailable > _PROBE_RETRIES:
                return self._give_up(slot, "worker could not be restarted")
            since = slot.since
            self._probe(slot)
            slot.since = since
            return []
        slot.probe = None
        slot.restarting = False
        slot.unavailable = 0
        slot.started = time.monotonic()  # a trial submitted with this probe starts now
        return []

    def _time_out(self, slot: _Slot) -> Finished:
        """Kill the actor running a trial past ``trial_timeout``; Ray restarts it for the next trial."""
        tag = slot.tag
        slot.ref = slot.tag = None
        slot.restarting = True
        slot.pid = slot.node = None
        try:
            self.ray.kill(slot.actor, no_restart=False)
        except Exception:  # noqa: BLE001 - died on its own meanwhile: the restart probe finds out
            pass
        self._probe(slot)
        return Finished(tag, None, f"timed out: still running after --trial-timeout {self.trial_timeout:g} s",
                        retry=False)

    def _finished(self, slot: _Slot) -> Finished:
        exc = self.ray.exceptions
        ref, tag = slot.ref, slot.tag
        slot.ref = slot.tag = None
        try:
            result = self.ray.get(ref, timeout=60)
        except exc.RayTaskError as err:  # run() itself raised (run_trial catches candidate faults)
            return Finished(tag, None, f"worker error: {err}".splitlines()[0][:300])
        except exc.RayError as err:  # the process or its node died (ActorDiedError, OutOfMemoryError...)
            self.deaths += 1
            slot.restarting = True
            slot.pid = slot.node = None
            self._probe(slot)  # queued until Ray has restarted the actor
            return Finished(tag, None, f"worker died: {type(err).__name__}{_why(err)}")
        if result.get("pid"):
            slot.pid = result["pid"]
        return Finished(tag, result)

    def _give_up(self, slot: _Slot, reason: str) -> list[Finished]:
        """Drop ``slot`` and kill its actor; the trial it held (if any) comes back with ``reason``."""
        self.slots.remove(slot)
        self.given_up += 1
        try:
            self.ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        if slot.ref is None:
            return []
        tag = slot.tag
        slot.ref = slot.tag = None
        return [Finished(tag, None, reason)]

    def _gone_message(self) -> str:
        return (
            f"no Ray worker left: {self.given_up} of {self.n_workers} could not be started or restarted "
            f"within {self.start_timeout:g} s (a lost node, or no room in the cluster for one trial's "
            "CPUs/GPUs)"
        )


def _why(err: Exception) -> str:
    """A few words on why an actor died, from Ray's long message."""
    text = str(err).lower()
    if "node" in text and ("died" in text or "dead" in text or "removed" in text):
        return " (its node was lost)"
    if "out of memory" in text or "memory monitor" in text:
        return " (out of memory)"
    return ""
