"""Checkpoints: trained weights with the architecture (and recipe, metrics) inside.

A checkpoint is a ``torch.save`` of plain types only (dicts, lists, strings,
numbers, tensors), so ``torch.load(weights_only=True)`` reads it and any
checkpoint rebuilds its model from the file alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.cost import check_fits
from nas.errors import CheckpointError, ConfigError
from nas.models import ArchConfig, build_model
from nas.outputs import Planned, write_output

FORMAT = "nas-lm-checkpoint/1"


def _plain(value: Any) -> Any:
    """Containers and scalars only (what ``weights_only`` loading accepts)."""
    if isinstance(value, Mapping):
        return {(k if isinstance(k, (str, int, float)) else str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def save_checkpoint(
    path: str | os.PathLike[str] | Planned,
    model: nn.Module,
    *,
    arch: ArchConfig | None = None,
    **extra: Any,
) -> None:
    """Write ``model``'s weights and its ArchConfig (plus ``extra`` plain data: recipe, metrics...)."""
    arch = arch if arch is not None else model.arch  # type: ignore[assignment]
    assert isinstance(arch, ArchConfig)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    doc = {"format": FORMAT, "arch": arch.to_dict(), "state_dict": state, **_plain(extra)}

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: a full disk surfaces as the OSError (nas.outputs.no_room)
            torch.save(doc, f)

    write_output(path, save)  # a command's Planned path: nas.outputs' rule


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checkpoint's contents, with ``model`` (rebuilt, weights loaded, eval mode) and ``arch`` added.

    A file that is missing, not a checkpoint, truncated or edited raises
    :class:`~nas.errors.CheckpointError` (or ConfigError for a bad architecture) naming it.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"{p}: checkpoint not found" if not p.exists() else f"{p}: is not a file")
    try:
        doc = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a file that is not a checkpoint
        raise CheckpointError(f"{p}: not a readable checkpoint ({type(err).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a {FORMAT} checkpoint")
    if "arch" not in doc or not isinstance(doc.get("state_dict"), Mapping):
        missing = "arch" if "arch" not in doc else "state_dict"
        raise CheckpointError(f"{p}: the checkpoint has no {missing!r} (truncated or edited)")
    try:
        arch = ArchConfig.from_dict(doc["arch"])
        check_fits(arch)  # a tampered size would allocate before load_state_dict could refuse it
    except ConfigError as err:
        raise err.at("arch").in_file(str(p)) from None
    model = build_model(arch)
    try:
        model.load_state_dict(doc["state_dict"])
    except (RuntimeError, TypeError, KeyError, ValueError) as err:
        # torch lists every missing, unexpected and mis-shaped tensor: the first line says enough
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{p}: its weights do not match its architecture ({first})") from None
    model.eval()
    return {**doc, "arch": arch, "model": model}


def load_model(path: str | os.PathLike[str]) -> nn.Module:
    """The trained model stored at ``path`` (by ``train --save``), on the CPU, in eval mode."""
    return load_checkpoint(path)["model"]
