"""What the driver needs from a pool of workers (no Ray here).

A pool runs trial payloads (plain dicts, see :mod:`nas.execution.worker`) and
hands back what happened to each.  Two exist: :class:`~nas.execution.ray_pool.RayPool`
(Ray actors, the default) and :class:`~nas.execution.local_pool.LocalPool`
(one trial at a time in the driver's own process, ``search --local``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol


@dataclasses.dataclass
class Finished:
    """A trial's outcome as the pool saw it: the worker's result, or the reason there is none."""

    tag: Any
    result: dict[str, Any] | None
    error: str | None = None  # the worker (process or node) died, or could not be started
    retry: bool = True  # False: running it again would end the same way (it ran past --trial-timeout)
    #: fetches the trained model the worker made (``resources.keep_weights``): safetensors checkpoint
    #: bytes, or None when it made none.  Called only for a trial the driver keeps, so the weights of the
    #: others never cross to the driver (a Ray object ref until then); may raise when they are lost.
    weights: Callable[[], bytes | None] | None = None


class NoWorkersLeft(RuntimeError):
    """Every worker of the pool is gone (died and could not be restarted, or never started)."""


class Pool(Protocol):
    """The interface the driver uses, all of it (the driver probes for nothing).

    ``submit`` is called only while ``has_idle()`` is true.  ``wait`` returns the
    trials that finished within ``timeout`` seconds (possibly none) and raises
    :class:`NoWorkersLeft` when the pool has no worker left to run anything.
    ``notes``: lines for the user once the pool has started (workers capped, say);
    ``size``: the workers it has (None: as many as were asked for); ``can_restart``:
    whether ``restart()`` may start its workers anew after every one of them died
    (a pool that started its own Ray); ``restart()`` returns lines for the user.
    :class:`PoolBase` gives the defaults of the last four.
    """

    notes: Sequence[str]

    @property
    def size(self) -> int | None: ...

    @property
    def can_restart(self) -> bool: ...

    def restart(self) -> list[str]: ...

    def has_idle(self) -> bool: ...

    @property
    def n_running(self) -> int: ...

    def submit(self, tag: Any, payload: dict[str, Any], exclusive: bool = False) -> None:
        """Run ``payload``; ``exclusive``: with no other trial on its GPU (see RayPool.submit)."""

    def wait(self, timeout: float) -> list[Finished]: ...

    def shutdown(self) -> None: ...


class PoolBase:
    """The defaults of :class:`Pool`'s optional part, for pools that cannot restart their workers."""

    notes: Sequence[str] = ()
    size: int | None = None
    can_restart: bool = False

    def restart(self) -> list[str]:
        raise RuntimeError(f"{type(self).__name__} cannot restart its workers (can_restart is False)")
