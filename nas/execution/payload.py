"""What the driver sends a worker for one trial: a typed record, plain data at the Ray boundary.

The worker (:mod:`nas.execution.worker`) reads the dict ``to_dict`` makes;
its keys are the field names.  Everything in it is plain data (the
architecture, recipe and budget as their ``to_dict`` forms), so it crosses a
process or a node without pickling any class of ours.  The spec travels once,
under ``spec``: no field repeats one of its sections' fields.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class TrialPayload:
    """One trial's work: what to train, for how long, on what, and where its hurdles stand."""

    arch: dict[str, Any]  # ArchConfig.to_dict()
    recipe: dict[str, Any]  # TrainRecipe.to_dict()
    budget: dict[str, Any]  # Budget.to_dict()
    data: str | None  # corpus path, None for the default corpus
    hurdles: list[float]  # budget fractions where the worker reports its validation loss
    thresholds: dict[str, float]  # {fraction key: loss above which the trial stops}
    logdir: str | None  # this trial's TensorBoard run, None for none
    hparams: dict[str, Any]  # the trial's parameters, for TensorBoard's HParams table
    #: the spec's other sections as their ``to_dict`` forms ({"data": ..., "search": ..., "resources": ...}):
    #: a field added to a section reaches the worker with no edit here.  The worker reads the evaluator
    #: and the prescreen from ``search``, and the device and compile from ``resources``, whose device is
    #: the one the driver resolved ("cpu" or "cuda"; "auto" only where nothing resolved it)
    spec: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The plain dict a worker receives (the keys are the field names)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialPayload:
        """The payload ``to_dict`` made (a worker's side of the boundary)."""
        return cls(**d)
