"""Starting or joining Ray for the pool (``nas.execution.ray_pool``).

These functions take the ``ray`` module as an argument and never import it:
``ray_pool`` stays the one module that imports Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from nas.errors import UserError
from nas.execution.capacity import available_memory, fit_local_workers, local_cpus
from nas.interrupts import held


def start_ray(
    ray: Any, n_workers: int, cpus_per_trial: float, address: str | None, dashboard: bool
) -> tuple[int, list[str]]:
    """Join ``address``, or start a local Ray; returns the workers it can hold (local: capped) and
    lines for the user saying why fewer workers than asked will run."""
    notes: list[str] = []
    try:
        if address:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        else:
            # Local Ray: loopback only (see ray_pool._import_ray), no dashboard unless asked, and never
            # attached to some other Ray found on this machine (address="local").
            # Ray 2.5x+ turns token authentication on for a new local cluster and says so on every
            # start ("Token authentication is enabled ... opt out"): a notice for Ray's own users, not
            # one for ours; the authentication stays as Ray set it (RAY_AUTH_MODE still decides).
            logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
                logging.ERROR
            )
            cpus = local_cpus(cpus_per_trial)
            n_workers, note = fit_local_workers(n_workers, cpus_per_trial, cpus, available_memory())
            notes += [note] if note else []
            before = descendants(os.getpid())
            try:
                ray.init(
                    address="local",
                    num_cpus=cpus,
                    include_dashboard=dashboard,
                    _node_ip_address="127.0.0.1",
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                )
            except BaseException:
                stop_a_start_cut_short(ray, before)
                raise
    except (ConnectionError, ray.exceptions.RayError, ValueError, RuntimeError) as err:
        first = f"{err}".splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"--address {address!r}: cannot connect to Ray: {first}") from None
    return n_workers, notes


def stop_a_start_cut_short(ray: Any, before: set[int]) -> None:
    """``ray.init`` of a local Ray stopped half-way (Ctrl-C, SIGTERM, an error): stop what it started.

    Interrupted inside Ray's node start, ``ray.shutdown()`` knows none of the processes (Ray records its
    node only once the start is done), and Ray's dashboard and runtime-env agents outlived the driver,
    ignoring SIGTERM.  So the processes this one started meanwhile (its descendants that were not there
    before: ``before``) are killed; they hold nothing worth keeping yet.
    """
    with held():  # a second Ctrl-C must not leave the cleanup half done
        started = descendants(os.getpid()) - before  # before Ray's shutdown orphans the agents
        with contextlib.suppress(Exception):
            ray.shutdown()
        for pid in started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> set[int]:
    """The PIDs of ``pid``'s children, their children and so on (empty where /proc is not there)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return set()
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])  # the name may hold spaces and ')'
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def check_gpus(ray: Any, gpus_per_trial: float, shutdown: bool) -> None:
    """Refuse at once a GPU request the cluster cannot hold (Ray would wait for it forever);
    ``shutdown``: stop the Ray this process started before refusing."""
    total = float(ray.cluster_resources().get("GPU", 0.0))
    if total < gpus_per_trial:
        if shutdown:
            ray.shutdown()
        raise UserError(
            f"--gpus-per-trial {gpus_per_trial:g}: the Ray cluster has {total:g} GPU(s); "
            "use --gpus-per-trial 0 (CPU) or join a cluster with GPUs (--address)"
        )


@contextlib.contextmanager
def keep_sigterm_handler(ray: Any) -> Iterator[None]:
    """Keep the SIGTERM handler the caller installed in Python while ``ray.init`` runs.

    ``ray.init`` installs two of its own: a Python one that kills the local Ray and
    exits 1 (so a search stopped by SIGTERM would end 1, not 143, and not re-queue),
    and, through its core worker, a native one that prints a stack dump.  Ray's
    Python handlers go through ``ray._private.utils.set_sigterm_handler``, which is
    made a no-op here; the caller's handler is put back afterwards, which also
    replaces the native one.  Without a caller's handler Ray's own are kept.
    """
    keep = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    if not callable(keep):
        yield
        return
    # private: Ray has no public way to keep ray.init from installing its SIGTERM handlers
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    original = getattr(utils, "set_sigterm_handler", None)
    if original is not None:
        utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        if original is not None:
            utils.set_sigterm_handler = original
        signal.signal(signal.SIGTERM, keep)
