"""What the driver needs from a pool of workers (no Ray here).

A pool runs trial payloads (plain dicts, see :mod:`nas.execution.worker`) and
hands back what happened to each.  Two exist: :class:`~nas.execution.ray_pool.RayPool`
(Ray actors, the default) and :class:`~nas.execution.local_pool.LocalPool`
(one trial at a time in the driver's own process, ``search --local``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol


@dataclasses.dataclass
class Finished:
    """A trial's outcome as the pool saw it: the worker's result, or the reason there is none."""

    tag: Any
    result: dict[str, Any] | None
    error: str | None = None  # the worker (process or node) died, or could not be started
    retry: bool = True  # False: running it again would end the same way (it ran past --trial-timeout)


class NoWorkersLeft(RuntimeError):
    """Every worker of the pool is gone (died and could not be restarted, or never started)."""


class Pool(Protocol):
    """The interface the driver uses.

    ``submit`` is called only while ``has_idle()`` is true.  ``wait`` returns the
    trials that finished within ``timeout`` seconds (possibly none) and raises
    :class:`NoWorkersLeft` when the pool has no worker left to run anything.
    """

    def has_idle(self) -> bool: ...

    @property
    def n_running(self) -> int: ...

    def submit(self, tag: Any, payload: dict[str, Any], exclusive: bool = False) -> None:
        """Run ``payload``; ``exclusive``: with no other trial on its GPU (see RayPool.submit)."""

    def wait(self, timeout: float) -> list[Finished]: ...

    def shutdown(self) -> None: ...
