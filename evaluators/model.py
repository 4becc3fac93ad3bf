"""Model preparation: build the candidate on its device, seeded, optionally compiled."""

from __future__ import annotations

import dataclasses
import time

import torch
from torch import nn

from evaluators.step import TrainStep
from nas.models import ArchConfig, build_model, parametrization
from nas.spec.training import TrainRecipe


class CompileFailed(RuntimeError):
    """``torch.compile`` refused the model, or the compiled model could not take its first step."""


@dataclasses.dataclass
class Prepared:
    """A candidate ready to train.

    ``model`` is the plain module: evaluation and checkpoints use it (a
    compiled wrapper would prefix every weight name, and evaluating through it
    would compile a second, inference graph).  ``step`` trains through the
    compiled wrapper when ``compiled``.
    """

    model: nn.Module
    step: TrainStep
    compiled: bool
    compile_seconds: float  # the torch.compile call; compiling itself happens in the first step


def prepare_model(
    arch: ArchConfig, recipe: TrainRecipe, device: torch.device, compile: bool = False
) -> Prepared:
    """``build_model(arch)`` after seeding torch with ``recipe.seed``, on ``device``, in training mode."""
    torch.manual_seed(recipe.seed)
    model = build_model(arch)
    # completep rescales standard's draws in place (nothing at the base shape), before the move
    parametrization.apply(model, parametrization.shape_of(arch, recipe))
    model = model.to(device)
    model.train()
    forward: nn.Module = model
    seconds = 0.0
    if compile:
        t0 = time.perf_counter()
        # Every candidate is a new graph: without a reset, a long-lived worker piles up cache entries
        # for the same forward code until dynamo's recompile limit silently turns compilation off.
        torch.compiler.reset()
        try:
            forward = torch.compile(model)
        except Exception as err:  # noqa: BLE001 - whatever the compiler raises, the caller trains eager
            raise CompileFailed(describe_compile_error(err)) from err
        seconds = time.perf_counter() - t0
    return Prepared(model, TrainStep(forward, recipe, device), compile, seconds)


def describe_compile_error(err: BaseException) -> str:
    """One line saying why compiling failed (the result's ``compile_error``)."""
    return f"{type(err).__name__}: {err}".strip().splitlines()[0][:300]
