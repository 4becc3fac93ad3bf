"""Checkpoints: trained weights with the architecture (and recipe, budget, metrics, data) inside.

Two formats, chosen by the file name when written and by the content when read:

* ``*.safetensors``: the weights as safetensors tensors, everything else as JSON
  strings in its metadata (``format``, ``arch``, ``recipe``, ``budget``, ``metrics``,
  ``data``; ``tied`` maps each tensor stored once to the names that share it, so the
  tied ``tok_emb``/``lm_head`` weight is one tensor in the file and tied again on load).
  Loading runs no code from the file, and other tools (Hugging Face's, ``safetensors``'s
  own) read the tensors and metadata.
* anything else (``*.pt``): a ``torch.save`` of plain types only (dicts, lists,
  strings, numbers, tensors), so ``torch.load(weights_only=True)`` reads it.

Either way any checkpoint rebuilds its model from the file alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.errors import CheckpointError, ConfigError
from nas.files.outputs import Planned, write_output
from nas.models import ArchConfig, build_model
from nas.models.cost import check_fits
from nas.validate import not_a_file

FORMAT = "nas-lm-checkpoint/1"

#: the file name ending that selects the safetensors format when writing
SAFETENSORS = ".safetensors"
#: the plain-data sections besides the architecture that a checkpoint may hold (``train --save`` writes the
#: first four; ``export`` adds where the model was found)
EXTRA_SECTIONS = ("recipe", "budget", "metrics", "data", "found")
#: what a checkpoint is, for the end of an error line about a file that is none
_VALID = "a checkpoint is a file `train --save` wrote (.safetensors or .pt)"


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
    """Write ``model``'s weights and its ArchConfig (plus ``extra`` plain data: recipe, metrics...):
    safetensors when the name ends in ``.safetensors``, else ``torch.save``."""
    arch = arch if arch is not None else model.arch  # type: ignore[assignment]
    assert isinstance(arch, ArchConfig)
    target = path.path if isinstance(path, Planned) else Path(path)
    if target.name.lower().endswith(SAFETENSORS):  # model.SAFETENSORS is one too
        tensors, header = _safetensors_parts(model, arch, extra)

        def save(tmp: Path) -> None:
            from safetensors.torch import save_file

            save_file(tensors, str(tmp), metadata=header)

        write_output(path, save)
        return
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    doc = {"format": FORMAT, "arch": arch.to_dict(), "state_dict": state, **_plain(extra)}

    def save_pt(tmp: Path) -> None:
        # a file object: a full disk surfaces as the OSError (nas.files.outputs.no_room)
        with open(tmp, "wb") as f:
            torch.save(doc, f)

    write_output(path, save_pt)  # a command's Planned path: nas.files.outputs' rule


def checkpoint_bytes(model: nn.Module, *, arch: ArchConfig | None = None, **extra: Any) -> bytes:
    """The safetensors checkpoint :func:`save_checkpoint` writes to a ``*.safetensors`` name, as bytes
    (a search's worker sends them to the driver, which keeps the best: ``resources.keep_weights``)."""
    from safetensors.torch import save

    arch = arch if arch is not None else model.arch  # type: ignore[assignment]
    assert isinstance(arch, ArchConfig)
    tensors, header = _safetensors_parts(model, arch, extra)
    return save(tensors, metadata=header)


def _safetensors_parts(
    model: nn.Module, arch: ArchConfig, extra: Mapping[str, Any]
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors (each shared one once) and the metadata header of a safetensors checkpoint."""
    tensors, tied = _stored_once(model.state_dict())
    meta = {"format": FORMAT, "arch": arch.to_dict(), "tied": tied, **_plain(extra)}
    return tensors, {k: json.dumps(v, allow_nan=True) for k, v in meta.items()}


def _stored_once(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, list[str]]]:
    """The tensors to store (each shared one once, under its first name) and ``{kept: [aliases]}``.

    safetensors refuses tensors that share memory; a tied ``lm_head.weight`` is the
    ``tok_emb.weight`` tensor itself, so it is stored once and named in ``tied``.
    """
    tensors: dict[str, torch.Tensor] = {}
    first: dict[tuple[int, int, tuple[int, ...], torch.dtype], str] = {}
    tied: dict[str, list[str]] = {}
    for name, value in state.items():
        key = (value.data_ptr(), value.storage_offset(), tuple(value.shape), value.dtype)
        if value.numel() and key in first:
            tied.setdefault(first[key], []).append(name)
            continue
        first[key] = name
        tensors[name] = value.detach().cpu().contiguous()
    return tensors, tied


def is_safetensors(path: str | os.PathLike[str]) -> bool:
    """Whether the file holds safetensors (an 8-byte header length, then a JSON header), not a torch zip."""
    with open(path, "rb") as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


def _read_safetensors(p: Path) -> dict[str, Any]:
    """A safetensors checkpoint as the document ``torch.save`` would have held (aliases restored)."""
    from safetensors import safe_open

    try:
        with safe_open(str(p), framework="pt", device="cpu") as f:
            header = f.metadata() or {}
            state = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open is no dict)
    except Exception as err:  # safetensors raises its own SafetensorError for a damaged file
        raise CheckpointError(f"{p}: not a readable checkpoint ({type(err).__name__}); {_VALID}") from None
    if header.get("format") != json.dumps(FORMAT):
        # Hugging Face's model.safetensors (metadata {"format": "pt"} at most): weights without an
        # architecture, which this tool cannot rebuild a model from
        raise CheckpointError(
            f"{p}: safetensors weights without nas-lm's metadata (a Hugging Face or other tool's weights "
            f"file?): no architecture to rebuild a model from; {_VALID}"
        )
    doc: dict[str, Any] = {}
    for key, text in header.items():
        try:
            doc[key] = json.loads(text)
        except (ValueError, RecursionError):  # json's parser recurses per level: deep nesting raised it
            raise CheckpointError(f"{p}: its metadata {key!r} is not JSON (edited?)") from None
    tied = doc.pop("tied", {}) or {}
    if not isinstance(tied, Mapping):
        raise CheckpointError(f"{p}: its metadata 'tied' is not a mapping (edited?)")
    for kept, aliases in tied.items():
        if kept not in state or not isinstance(aliases, list):
            raise CheckpointError(f"{p}: its metadata 'tied' names {kept!r}, which it does not hold")
        for alias in aliases:
            if str(alias) in state:  # an alias never silently replaces a tensor the file also holds
                raise CheckpointError(
                    f"{p}: its metadata 'tied' makes {alias!r} an alias of {kept!r}, but the file also holds "
                    f"{alias!r} itself (edited?)"
                )
            state[str(alias)] = state[kept]
    doc["state_dict"] = state
    return doc


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checkpoint's contents (either format), with ``model`` (rebuilt, weights loaded, eval mode)
    and ``arch`` added.

    A file that is missing, not a checkpoint, truncated or edited raises
    :class:`~nas.errors.CheckpointError` (or ConfigError for a bad architecture) naming it.
    """
    p = Path(path)
    problem = not_a_file(p)
    if problem:
        raise CheckpointError(f"{p}: checkpoint not found" if problem == "missing" else f"{p}: {problem}")
    try:
        safetensors = is_safetensors(p)
    except OSError as err:
        raise CheckpointError(f"{p}: not readable ({err.strerror})") from None
    if safetensors:
        doc = _read_safetensors(p)
    else:
        try:
            with open(p, "rb") as f:  # a file object: torch 2.13 takes a name ending .safetensors for one
                doc = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types for a file that is not a checkpoint
            kind = type(err).__name__
            raise CheckpointError(f"{p}: not a readable checkpoint ({kind}); {_VALID}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a {FORMAT} checkpoint; {_VALID}")
    for key in EXTRA_SECTIONS:  # what train --save records: read with .get by export (a traceback)
        if doc.get(key) is not None and not isinstance(doc[key], Mapping):
            raise CheckpointError(f"{p}: its {key!r} is a {type(doc[key]).__name__}, not a mapping (edited?)")
    if "arch" not in doc or not isinstance(doc.get("state_dict"), Mapping):
        missing = "arch" if "arch" not in doc else "state_dict"
        raise CheckpointError(f"{p}: the checkpoint has no {missing!r} (truncated or edited)")
    try:
        arch = ArchConfig.from_dict(doc["arch"])
        check_fits(arch)  # a tampered size would allocate before load_state_dict could refuse it
    except ConfigError as err:
        raise err.at("arch").in_file(str(p)) from None
    recorded = (doc.get("metrics") or {}).get("arch_id")
    if recorded is not None and recorded != arch.arch_id:  # the metrics were measured on another model
        raise CheckpointError(
            f"{p}: its architecture (arch_id {arch.arch_id}) is not the one it was trained as (recorded "
            f"{recorded}): its metadata was edited, so its weights and recorded loss belong to another model"
        )
    model = build_model(arch)
    _check_dtypes(p, doc["state_dict"], model.state_dict())
    recipe = doc.get("recipe")
    if isinstance(recipe, Mapping) and recipe.get("parametrization") == "completep":
        # completep's multipliers are part of the function the weights compute: restored from the recipe
        from nas.models.parametrization import set_multipliers, shape_of
        from nas.spec.training import TrainRecipe

        try:
            set_multipliers(model, shape_of(arch, TrainRecipe.from_dict(dict(recipe))))
        except ConfigError as err:
            raise err.at("recipe").in_file(str(p)) from None
    try:
        model.load_state_dict(doc["state_dict"])
    except (RuntimeError, TypeError, KeyError, ValueError) as err:
        # torch lists every missing, unexpected and mis-shaped tensor: the first line says enough
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{p}: its weights do not match its architecture ({first})") from None
    model.eval()
    return {**doc, "arch": arch, "model": model}


def _check_dtypes(p: Path, stored: Mapping[str, Any], expected: Mapping[str, torch.Tensor]) -> None:
    """Refuse a stored tensor of another kind than the model's (integers for a float weight): loading
    would convert it silently, and the model would compute with weights nobody trained."""
    for name, want in expected.items():
        got = stored.get(name)
        if not isinstance(got, torch.Tensor):
            continue  # missing or not a tensor: load_state_dict names it
        if got.is_floating_point() != want.is_floating_point() or got.is_complex() != want.is_complex():
            raise CheckpointError(
                f"{p}: its tensor {name!r} is {str(got.dtype).removeprefix('torch.')}, where the model holds "
                f"{str(want.dtype).removeprefix('torch.')} (edited, or not this tool's checkpoint)"
            )


def load_model(path: str | os.PathLike[str]) -> nn.Module:
    """The trained model stored at ``path`` (by ``train --save``), on the CPU, in eval mode."""
    return load_checkpoint(path)["model"]
