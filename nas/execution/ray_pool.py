"""Ray workers: one actor per concurrent trial.  The only module that imports Ray.

Actors (rather than tasks) keep torch imported and the corpus loaded between
trials, which saves seconds per trial.  Ray Tune is not used: measured in
DESIGN.md, Tune + OptunaSearch costs 0.24 to 2.6 s per trial against ~0.03 s
for this ask-and-tell loop, and it records early-stopped trials as complete.

Failures (docs/reliability.md has each with its test): a worker that dies
mid-trial ends it with ``Finished(result=None, error="worker died: ...")``
and Ray restarts the actor (``max_restarts=-1``), which gets no work until it
answers a tiny ``whoami`` probe; a slot whose actor does not answer within
``start_timeout`` seconds (no room for it anywhere) is given up, and with none
left ``wait`` raises :class:`~nas.execution.pool.NoWorkersLeft`; a trial past
``trial_timeout`` has its actor killed and restarted (``ray.cancel`` cannot
interrupt a running actor call, so the pool keeps the clock) and comes back
failed with ``retry=False``.

Weights (``resources.keep_weights``): a trial's call has two return values,
its result and its model's checkpoint bytes (None unless the search keeps
weights).  The driver owns both refs but fetches only the result; the bytes
stay in the object store of the worker's node until the driver, having decided
to keep the trial, calls ``Finished.weights`` (no shared file system needed),
and are freed when it drops the ref.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from nas.execution.capacity import check_speaks_grpc, check_trial_resources
from nas.execution.pool import Finished, NoWorkersLeft
from nas.execution.ray_start import check_gpus, keep_sigterm_handler, start_ray
from nas.execution.slots import Slot, release, solo_runner, why_died
from nas.interrupts import held

__all__ = ["Finished", "NoWorkersLeft", "RayPool"]

#: Ray's switch for single-node operation (meant for Windows and macOS); see ``_import_ray``.
_SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: how many failed ``whoami`` calls in a row a (re)starting actor may give before its slot is dropped
_PROBE_RETRIES = 5
#: seconds the driver waits for a kept trial's checkpoint bytes to arrive from the worker's node
WEIGHTS_TIMEOUT = 600.0


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

    def whoami(self) -> tuple[int, str, tuple[str, ...]]:
        """PID, node id and the GPU ids Ray gave this actor (its CUDA_VISIBLE_DEVICES)."""
        import ray

        gpus = tuple(str(g) for g in ray.get_gpu_ids())
        return os.getpid(), ray.get_runtime_context().get_node_id(), gpus

    def run(self, payload: dict[str, Any]) -> tuple[dict[str, Any], bytes | None]:
        """The trial's result and, apart (a second return value: its own object ref), the trained
        model's checkpoint bytes when the search keeps weights, else None."""
        import time

        import ray

        from nas.execution.worker import WEIGHTS, run_trial

        started = time.time()
        result = run_trial(payload)
        result["node"] = ray.get_runtime_context().get_node_id()
        result["gpus"] = [str(g) for g in ray.get_gpu_ids()]
        result["started_at"], result["finished_at"] = started, time.time()
        return result, result.pop(WEIGHTS, None)


_ACTOR_CLASS: Any = None


def _actor_class(ray: Any) -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = ray.remote(max_restarts=-1, max_task_retries=0)(TrialActor)
    return _ACTOR_CLASS


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
        check_trial_resources(cpus_per_trial, gpus_per_trial)
        self._asked = (n_workers, cpus_per_trial, dashboard)  # what restart() starts again
        if address and not _import_ray(local=False).is_initialized():
            check_speaks_grpc(address)  # Ray would retry a server that is not Ray for minutes
        ray = self.ray = _import_ray(local=address is None)
        self.notes: list[str] = []  # lines for the user (workers capped)
        self.start_timeout = float(start_timeout)
        self.trial_timeout = trial_timeout
        self.started_ray = False
        self.slots: list[Slot] = []
        if not ray.is_initialized():
            with keep_sigterm_handler(ray):
                n_workers, self.notes = start_ray(ray, n_workers, cpus_per_trial, address, dashboard)
            self.started_ray = True
        self.gpus_per_trial = gpus_per_trial
        self.cpus_per_trial = cpus_per_trial
        self.deaths = 0  # trials whose worker died under them
        try:
            if gpus_per_trial > 0:
                check_gpus(ray, gpus_per_trial, shutdown=self.started_ray)
            self._start_slots(n_workers)
        except BaseException:
            # no pool is returned, so nobody else would stop this Ray: a SIGTERM here ends the process
            # without Python's exit handlers, where Ray's own shutdown would have run
            self.shutdown()
            raise

    def _start_slots(self, n_workers: int) -> None:
        self.node_ip = self.ray.util.get_node_ip_address()
        actor_cls = _actor_class(self.ray).options(num_cpus=self.cpus_per_trial, num_gpus=self.gpus_per_trial)
        self.solo: list[tuple[Any, dict[str, Any]]] = []  # trials waiting for a GPU to themselves
        self.slots = []
        for _ in range(n_workers):
            slot = Slot(actor_cls.remote(max(1, int(self.cpus_per_trial))))
            self._probe(slot)
            self.slots.append(slot)
        self.n_workers = n_workers
        self.given_up = 0  # slots dropped because their actor could not be (re)started

    @property
    def can_restart(self) -> bool:
        """Whether this pool started the Ray it uses (so it may start it again); a joined cluster: no."""
        return self.started_ray

    def restart(self) -> list[str]:
        """Start a new local Ray after the one this pool started died, with new workers.

        Every trial the pool had is forgotten: the caller submits again what was running.
        Returns lines for the user (workers capped).  A bare ``ray.shutdown()`` then
        ``ray.init()`` is all it takes: Ray cleans up what is left of the dead node.
        """
        if not self.started_ray:
            raise RuntimeError("restart() is for a Ray this pool started; a joined cluster is not restarted")
        for slot in self.slots:
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - its node is gone: nothing left to stop
                pass
        self.slots = []
        with held():  # see shutdown()
            try:
                self.ray.shutdown()
            except Exception:  # noqa: BLE001 - the dead node's processes may be gone already
                pass
        n_workers, cpus_per_trial, dashboard = self._asked
        with keep_sigterm_handler(self.ray):
            n_workers, notes = start_ray(self.ray, n_workers, cpus_per_trial, None, dashboard)
        self._start_slots(n_workers)
        return notes

    # -- the pool interface -------------------------------------------------------------------
    def has_idle(self) -> bool:
        return any(self._idle(s) for s in self.slots)

    @property
    def n_running(self) -> int:
        return sum(s.ref is not None for s in self.slots) + len(self.solo)

    def submit(self, tag: Any, payload: dict[str, Any], exclusive: bool = False) -> None:
        """Run ``payload``; ``exclusive``: with no other trial on its GPU (a retry after running out
        of GPU memory while sharing one).  An exclusive trial waits until the other trials on the
        GPU it is given have ended, and that GPU takes no other work until it ends."""
        if exclusive and 0 < self.gpus_per_trial < 1:
            self.solo.append((tag, payload))
            self._place_solo()
            return
        idle = [s for s in self.slots if self._idle(s)]
        if not idle:
            raise RuntimeError("no idle worker; check has_idle() first")
        slot = min(idle, key=lambda s: s.probe is not None)  # an actor known to be up first
        if slot.probe is None:
            self._probe(slot)  # answered just before the trial starts: says the actor is up, and its pid
        slot.ref, slot.weights = self._run(slot, payload)
        slot.tag = tag
        slot.started = time.monotonic()  # reset when the probe is answered, if it is still out

    def wait(self, timeout: float) -> list[Finished]:
        """Trials finished within ``timeout`` s; also notices restarted and stuck actors."""
        if not self.slots:
            raise NoWorkersLeft(self._gone_message())
        self._place_solo()
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
                out += self._give_up(
                    slot,
                    f"worker not (re)started within {self.start_timeout:g} s "
                    "(no room for it in the Ray cluster?)",
                )
            elif (
                self.trial_timeout is not None
                and slot.ref is not None
                and slot.probe is None
                and now - slot.started > self.trial_timeout
            ):
                out.append(self._time_out(slot))
        return out

    def shutdown(self) -> None:
        # Ctrl-C or SIGTERM waits until Ray is down: cut short, its shutdown left the dashboard and
        # runtime-env agents running for good (the driver then ends without Python's exit handlers).
        # held() also puts the SIGTERM handler back afterwards: ray.shutdown() sets SIGTERM to its default
        # action in C (its core worker's doing; Python still reports its handler), so a SIGTERM after a
        # search's Ray was down (its results printing) killed the driver outright, exit -15, no line.
        with held():
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
    def _idle(slot: Slot) -> bool:
        return slot.ref is None and not slot.restarting and slot.held is None

    def _place_solo(self) -> None:
        """Start the first exclusive trial once the GPU held for it has no other trial running."""
        while self.solo:
            runner = solo_runner(self.slots, self.solo[0][0])
            if runner is None:
                return
            tag, payload = self.solo.pop(0)
            self._probe(runner)
            runner.ref, runner.weights = self._run(runner, payload)
            runner.tag = tag
            runner.started = time.monotonic()

    @staticmethod
    def _run(slot: Slot, payload: dict[str, Any]) -> tuple[Any, Any]:
        """Start ``payload`` on ``slot``'s actor: the refs of its result and of its checkpoint bytes.

        Two return values, so that the result comes to the driver alone and the weights stay in the
        object store of the worker's node until the driver asks for them (only for a trial it keeps;
        Ray frees the others once their ref is dropped).  The driver owns both, as any return value.
        """
        result, weights = slot.actor.run.options(num_returns=2).remote(payload)
        return result, weights

    def _fetcher(self, ref: Any) -> Any:
        """A call that fetches the checkpoint bytes behind ``ref`` (None: the worker made none)."""
        ray = self.ray
        return lambda: ray.get(ref, timeout=WEIGHTS_TIMEOUT)

    def _release(self, tag: Any) -> None:
        release(self.slots, tag)

    def _probe(self, slot: Slot) -> None:
        slot.probe = slot.actor.whoami.remote()
        slot.since = time.monotonic()

    def _answered(self, slot: Slot) -> list[Finished]:
        try:
            slot.pid, slot.node, slot.gpus = self.ray.get(slot.probe, timeout=60)
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

    def _time_out(self, slot: Slot) -> Finished:
        """Kill the actor running a trial past ``trial_timeout``; Ray restarts it for the next trial."""
        tag = slot.tag
        slot.ref = slot.tag = slot.weights = None
        self._release(tag)
        slot.restarting = True
        slot.pid = slot.node = None
        try:
            self.ray.kill(slot.actor, no_restart=False)
        except Exception:  # noqa: BLE001 - died on its own meanwhile: the restart probe finds out
            pass
        self._probe(slot)
        return Finished(
            tag, None, f"timed out: still running after --trial-timeout {self.trial_timeout:g} s", retry=False
        )

    def _finished(self, slot: Slot) -> Finished:
        exc = self.ray.exceptions
        ref, tag, weights = slot.ref, slot.tag, slot.weights
        slot.ref = slot.tag = slot.weights = None
        self._release(tag)
        try:
            result = self.ray.get(ref, timeout=60)
        except exc.RayTaskError as err:  # run() itself raised (run_trial catches candidate faults)
            return Finished(tag, None, f"worker error: {err}".splitlines()[0][:300])
        except exc.RayError as err:  # the process or its node died (ActorDiedError, OutOfMemoryError...)
            self.deaths += 1
            slot.restarting = True
            slot.pid = slot.node = None
            self._probe(slot)  # queued until Ray has restarted the actor
            return Finished(tag, None, f"worker died: {type(err).__name__}{why_died(err)}")
        if result.get("pid"):
            slot.pid = result["pid"]
        return Finished(tag, result, weights=self._fetcher(weights))

    def _give_up(self, slot: Slot, reason: str) -> list[Finished]:
        """Drop ``slot`` and kill its actor; the trial it held (if any) comes back with ``reason``."""
        self.slots.remove(slot)
        self.given_up += 1
        if slot.tag is not None:
            self._release(slot.tag)
        try:
            self.ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        if slot.ref is None:
            return []
        tag = slot.tag
        slot.ref = slot.tag = slot.weights = None
        return [Finished(tag, None, reason)]

    def _gone_message(self) -> str:
        return (
            f"no Ray worker left: {self.given_up} of {self.n_workers} could not be started or restarted "
            f"within {self.start_timeout:g} s (a lost node, or no room in the cluster for one trial's "
            "CPUs/GPUs)"
        )
