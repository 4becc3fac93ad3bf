"""The one rule for every file a command writes for the user (``plot``, ``export --out``, ``train --save``,
``confirm --report`` and the figures beside it).

A command writes new files, replaces only a file it wrote itself and that is
unchanged since (or any file with ``--force``), and refuses anything else in
one line.  Checked twice:

* :func:`plan_output` at the start, before any work: the path must be a
  regular file name (not a directory, not a link to nothing, not a device)
  in a directory that can be written, and a file already there must be one
  this tool wrote (or ``force``).  It records what is there (its SHA-256) as
  the state the write may replace.
* :func:`write_output` when the file is written: the content goes to a
  temporary file beside it, then either appears under the name only if the
  name is still free (``os.link`` fails on an existing name: exclusive
  creation) or replaces the file only if it is still the one seen at the
  start.  So two runs with one ``--save``, or a file created there while a
  model trained, are never overwritten.  A full disk ends in one line and the
  earlier file is intact (the temporary file is removed).

What this tool wrote is remembered outside the user's directories, in
``$NAS_CACHE_DIR/written/`` (one small record per file: its path and
SHA-256), so no marker file is left beside the outputs.  Python's
``tempfile`` and ``os.replace`` give the atomic parts; nothing in the
standard library says "replace only if unchanged", hence this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from nas.errors import UserError
from nas.validate import check_writable_dir

#: errors that mean "no room": a full disk, a quota, a file-size limit
_NO_ROOM = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def no_room(err: BaseException | None) -> OSError | None:
    """The "no room" OSError (full disk, quota, file-size limit) behind ``err``, if there is one:
    libraries wrap it (torch.save in a RuntimeError, SQLAlchemy in its own errors)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in _NO_ROOM:
            return err
        err = err.__cause__ or err.__context__
    return None


@dataclasses.dataclass(frozen=True)
class Planned:
    """An output path checked at the start, and what a write may replace there."""

    path: Path
    what: str  # the flag that named it, for messages: "--out", "--save"
    replaces: str | None  # SHA-256 of the file there at the start (this tool's, or forced); None: none was
    hint: str  # how the user may allow replacing a file ("pass --force to replace it")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _record(path: Path) -> Path:
    from nas.data.corpus import cache_dir

    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return cache_dir() / "written" / f"{key}.json"


def written_here(path: Path) -> bool:
    """Whether ``path`` holds exactly what this tool last wrote there."""
    try:
        doc = json.loads(_record(path).read_text(encoding="utf-8"))
        return doc.get("path") == str(path.resolve()) and doc.get("sha256") == _digest(path)
    except (OSError, ValueError, AttributeError):
        return False


def _remember(path: Path) -> None:
    """Note that this tool wrote ``path`` as it is now (best effort: without a record, a later run
    asks for ``--force``, which is the safe side)."""
    try:
        record = _record(path)
        record.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".record.", dir=record.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"path": str(path.resolve()), "sha256": _digest(path)}, f)
        os.replace(tmp, record)
    except OSError:
        pass


def plan_output(
    path: str | os.PathLike[str],
    what: str,
    *,
    force: bool = False,
    example: str | None = "out",
) -> Planned:
    """Check an output path before any work (creates nothing); see the module docstring.

    ``example``: a file name to suggest when a directory is given (None: the command chose the
    name, as ``plot`` does).  Pass ``path`` as the user typed it: a trailing slash means a directory.
    """
    if not str(path).strip():
        raise UserError(f"{what} is empty; give a file name")
    p = Path(path).expanduser()
    shown = f"{what} {str(path)!r}"
    if p.is_symlink() and not p.exists():
        raise UserError(f"{shown}: is a link to {os.readlink(p)!r}, which does not exist; give a file name")
    if p.is_dir() or str(path).endswith(os.sep):
        if example is None:  # a name the command chose (plot's pareto.png): the user cannot rename it
            raise UserError(f"{shown}: is a directory where this command writes a file; move it away or "
                            f"choose another {what}")  # fmt: skip
        raise UserError(f"{shown}: is a directory; give a file name such as {p / example}")
    if p.exists() and not p.is_file():  # a device (/dev/null) or a pipe would be replaced by a file
        raise UserError(f"{shown}: exists and is not a regular file (a device, a pipe or a socket); "
                        "give the name of a file")  # fmt: skip
    hint = "pass --force to replace it"
    replaces = None
    if p.exists():
        if not (force or written_here(p)):
            raise UserError(
                f"{shown}: a file is there that this tool did not write (or that changed since); {hint}"
            )
        if not os.access(p, os.W_OK):
            raise UserError(f"{shown}: the file exists and is not writable")
        replaces = _digest(p)
    check_writable_dir(p.parent, what)
    return Planned(p, what, replaces, hint)


def write_output(target: Planned | str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Write ``target`` through ``write(temporary_path)`` under the rule above; returns the path.

    A plain path (library use: ``nas.save_arch``, ``save_checkpoint``) is written atomically
    over whatever is there: the caller decided; a command's outputs are :class:`Planned`.
    """
    if not isinstance(target, Planned):
        return _replace(Path(target), write)
    p = target.path
    shown = f"{target.what} {str(p)!r}"
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{p.stem}.", suffix=p.suffix, dir=p.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        try:
            write(tmp)
        except Exception as err:
            full = no_room(err)  # torch.save raises a RuntimeError whose context is the OSError
            if full is None:
                raise
            kept = "the earlier file is intact" if p.exists() else "nothing was written"
            raise UserError(f"{shown}: no room to write it ({full.strerror}); {kept}") from None
        appeared = f"{shown}: a file appeared there while this ran; it is left as it is ({target.hint})"
        if target.replaces is None:
            try:
                os.link(tmp, p)  # fails if the name was taken meanwhile: exclusive creation
            except FileExistsError:
                raise UserError(appeared) from None
            except OSError:  # a file system without hard links: create exclusively, then fill in
                try:
                    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    raise UserError(appeared) from None
                os.replace(tmp, p)
        else:
            if not p.is_file() or _digest(p) != target.replaces:
                raise UserError(f"{shown}: the file there changed while this ran; it is left as it is "
                                f"({target.hint})")  # fmt: skip
            os.replace(tmp, p)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    _remember(p)
    return p


def _replace(p: Path, write: Callable[[Path], None]) -> Path:
    """Write ``p`` through a temporary file and rename (a reader never sees half a file)."""
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{p.stem}.", suffix=p.suffix, dir=p.parent)
    os.close(fd)
    try:
        write(Path(name))
        os.replace(name, p)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
    return p
