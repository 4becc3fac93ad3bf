"""The YAML files that ship with the package: search spaces and example architectures.

In the repository they live at the top, in ``search_spaces/`` and
``examples/archs/`` (the docs refer to those paths); ``pyproject.toml`` installs
them as the data-only packages ``nas.shipped.spaces`` and ``nas.shipped.archs``,
so a wheel (and ``pip install .``) carries them and they are read here through
:mod:`importlib.resources`, wherever the package is installed.  A checkout used
in place (``pip install -e .``, or never installed) reads its own two directories.

``--space primer`` and ``--arch vanilla`` name shipped files: :func:`space_path`
and :func:`arch_path` take what the user typed and return the file to read.
Torch-free: the CLI resolves names before anything heavy is imported.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.resources
import os
from pathlib import Path
from typing import TYPE_CHECKING

from nas.errors import UserError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["arch_path", "shipped_arch", "shipped_archs", "shipped_space", "shipped_spaces", "space_path"]

#: kind -> (its directory in this package once installed, its directory in the repository, what a file is)
_KINDS = {
    "space": ("spaces", "search_spaces", "search space"),
    "architecture": ("archs", "examples/archs", "architecture file"),
}
_CHECKOUT = Path(__file__).resolve().parents[2]
SUFFIX = ".yaml"

# Files extracted from a zip import (see _real_path), removed when the interpreter exits.
_extracted = contextlib.ExitStack()
atexit.register(_extracted.close)


def _root(kind: str) -> Traversable:
    subdir, repo_dir, _ = _KINDS[kind]
    installed = importlib.resources.files(__name__) / subdir
    if installed.is_dir():  # installed from a wheel (pip install .): nas/shipped/spaces/*.yaml
        return installed
    # The repository's own directory: a checkout used as it is (PYTHONPATH, run_search.py) or
    # installed with pip install -e (whose import hook does not find a mapped package without an
    # __init__.py, but maps it onto this same directory).
    return _CHECKOUT / repo_dir


def _names(kind: str) -> list[str]:
    root = _root(kind)
    if not root.is_dir():
        return []
    return sorted(p.name[: -len(SUFFIX)] for p in root.iterdir() if p.name.endswith(SUFFIX) and p.is_file())


def _real_path(resource: Traversable) -> Path:
    """A file system path of ``resource``.

    Installed by setuptools (a wheel, ``pip install .`` or ``-e``) the package is a
    directory and ``files()`` already returns real paths; only an import from a zip
    archive needs the file copied out (kept until exit: callers hold on to the path).
    """
    if isinstance(resource, Path):
        return resource
    return _extracted.enter_context(importlib.resources.as_file(resource))


def _shipped(kind: str, name: str) -> Path:
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
    names = _names(kind)
    if stem not in names:
        raise UserError(f"{name!r} is not a shipped {kind}; shipped: {', '.join(names) or '(none)'}")
    return _real_path(_root(kind) / f"{stem}{SUFFIX}")


def shipped_spaces() -> list[str]:
    """Names of the shipped search spaces (``default``, ``primer``, ...)."""
    return _names("space")


def shipped_archs() -> list[str]:
    """Names of the shipped example architectures (``vanilla``, ``primer_ez``, ...)."""
    return _names("architecture")


def shipped_space(name: str) -> Path:
    """The shipped search space ``name`` (``primer`` or ``primer.yaml``); UserError if there is none."""
    return _shipped("space", name)


def shipped_arch(name: str) -> Path:
    """The shipped architecture ``name`` (``vanilla`` or ``vanilla.yaml``); UserError if there is none."""
    return _shipped("architecture", name)


def _resolve(kind: str, arg: str | os.PathLike[str]) -> Path:
    text = os.fspath(arg)
    path = Path(text)
    if path.exists():  # a file of the user's wins over a shipped one of the same name
        return path
    stem = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else path.name
    bare = os.sep not in text and "/" not in text
    # search_spaces/primer.yaml as the docs write it works outside a checkout too
    spelled_as_in_repo = path.parent.as_posix() == _KINDS[kind][1]
    if (bare or spelled_as_in_repo) and stem in _names(kind):
        return _real_path(_root(kind) / f"{stem}{SUFFIX}")
    if bare:  # the reader's words, then what the name could have been
        names = ", ".join(_names(kind)) or "(none)"
        raise UserError(
            f"{text}: {_KINDS[kind][2]} not found: no such file, nor a shipped {kind} (shipped: {names})"
        )
    return path  # a path that is not there: reading it says so, naming it


def space_path(arg: str | os.PathLike[str]) -> Path:
    """The search-space file ``arg`` names: a path that exists, else a shipped space's name.

    ``primer``, ``primer.yaml`` and ``search_spaces/primer.yaml`` (when there is no
    such file here) name the shipped ``primer`` space; an unknown bare name is a
    one-line UserError (``NAME: search space not found: ...``) listing the
    shipped ones; any other missing path is returned as given (reading it says
    "not found").
    """
    return _resolve("space", arg)


def arch_path(arg: str | os.PathLike[str]) -> Path:
    """The architecture file ``arg`` names, as :func:`space_path` does (``vanilla``, ``vanilla.yaml``,
    ``examples/archs/vanilla.yaml``)."""
    return _resolve("architecture", arg)
