"""What the Ray pool knows about each worker slot, and which slots share a GPU (no Ray here)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Slot:
    """One actor and what the pool knows about it."""

    actor: Any
    probe: Any = None  # ObjectRef of a whoami() not answered yet (the actor is starting or about to run)
    since: float = 0.0  # when ``probe`` was sent
    pid: int | None = None
    node: str | None = None
    ref: Any = None  # ObjectRef of the running trial
    weights: Any = None  # ObjectRef of its checkpoint bytes (the actor's second return value; often None)
    tag: Any = None
    started: float = 0.0  # when the trial started (the actor answered the probe sent with it)
    restarting: bool = False  # died; gets no work until the restarted actor answers
    unavailable: int = 0  # failed whoami calls in a row
    gpus: tuple[str, ...] = ()  # GPU ids Ray gave the actor; same node and ids: a shared GPU
    held: Any = None  # tag of a trial that must have this slot's GPU to itself: no other work meanwhile


def quietest_gpu(slots: list[Slot]) -> list[Slot]:
    """The slots sharing the GPU that runs the fewest trials now, its free slots first.

    Slots share a GPU when they are on the same node with the same GPU ids
    (Ray gives fractional-GPU actors on one GPU the same id).  Slots that have
    not yet said which GPU they have, and slots already held, are left out.
    """
    groups: dict[tuple[str, tuple[str, ...]], list[Slot]] = {}
    for slot in slots:
        if slot.gpus and slot.held is None:
            groups.setdefault((slot.node or "", slot.gpus), []).append(slot)
    if not groups:
        return []
    group = min(groups.values(), key=lambda g: sum(s.ref is not None for s in g))
    return sorted(group, key=lambda s: s.ref is not None)


def solo_runner(slots: list[Slot], tag: Any) -> Slot | None:
    """The slot that runs the exclusive trial ``tag`` now, or None while it must wait.

    The first call holds the slots of the quietest GPU for ``tag`` (they take no
    new work); the trial starts once none of them runs a trial or is starting.
    """
    group = [s for s in slots if s.held == tag]
    if not group:
        group = quietest_gpu(slots)
        if not group:
            return None  # no worker has said which GPU it has yet
        for slot in group:
            slot.held = tag
    if any(s.ref is not None or s.probe is not None or s.restarting for s in group):
        return None  # the GPU's other trials are still running
    return group[0]


def release(slots: list[Slot], tag: Any) -> None:
    """The exclusive trial ``tag`` ended (whichever way): the slots held for it take work again."""
    for slot in slots:
        if slot.held == tag:
            slot.held = None


def why_died(err: Exception) -> str:
    """A few words on why an actor died, from Ray's long message."""
    text = str(err).lower()
    if "node" in text and ("died" in text or "dead" in text or "removed" in text):
        return " (its node was lost)"
    if "out of memory" in text or "memory monitor" in text:
        return " (out of memory)"
    return ""
