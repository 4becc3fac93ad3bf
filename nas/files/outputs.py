"""The one rule for every file a command writes for the user (``plot``, ``export --out``, ``train --save``,
``confirm --report`` and the figures beside it).

A command writes new files, replaces only a file it wrote itself and that is
unchanged since (or any file with ``--force``), and refuses anything else in
one line.  Trained weights (``train --save``) are the exception: any file there,
one this tool wrote included, needs ``--force`` (``replace_own=False``).  Checked twice:

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

Ctrl-C and SIGTERM remove the temporary file on the way out (:mod:`nas.interrupts`), and wait while
the finished file is moved into place and recorded.  A writer killed outright (SIGKILL, power loss)
cannot: its temporary file (``.NAME.XXXXXXXX.nas-partial``) is held under an advisory lock while its
writer lives, and the next writer into that directory removes every one whose lock is free
(:func:`partial`, used by every writer of the tool, the caches included).

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
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from nas.errors import UserError
from nas.interrupts import held
from nas.validate import check_file_name, check_writable_dir

#: how a user may allow replacing a file (every command that writes one has --force)
HINT = "pass --force to replace it"

#: errors that mean "no room": a full disk, a quota, a file-size limit
_NO_ROOM = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def causes(err: BaseException | None) -> Iterator[BaseException]:
    """``err`` and what it was raised from or while handling, innermost last (each once)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


#: how Rust's std::io names "no room" in the errors of libraries written in Rust (safetensors' save_file
#: raises a SafetensorError whose text is all that is left of the OS error: "... StorageFull ...
#: (os error 28)"); errno: the number the words stand for
_RUST_NO_ROOM = {
    "StorageFull": errno.ENOSPC,
    "FileTooLarge": errno.EFBIG,
    "QuotaExceeded": errno.EDQUOT,
    **{f"os error {n}": n for n in _NO_ROOM},
}


def no_room(err: BaseException | None) -> OSError | None:
    """The "no room" OSError (full disk, quota, file-size limit) behind ``err``, if there is one:
    libraries wrap it (torch.save in a RuntimeError, SQLAlchemy in its own errors, safetensors in an error
    that keeps only its words)."""
    for e in causes(err):
        if isinstance(e, OSError) and e.errno in _NO_ROOM:
            return e
    for e in causes(err):
        text = str(e)
        for words, number in _RUST_NO_ROOM.items():
            if words in text:
                return OSError(number, os.strerror(number))
    return None


#: the end of every temporary file or directory a writer of this tool makes beside what it writes
PARTIAL = ".nas-partial"
_PARTIAL_NAME = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(PARTIAL))  # tempfile's 8 random characters


def _lock(fd: int, wait: bool = False) -> bool:
    """Take the advisory lock on ``fd``; False if another process holds it or the file system has no
    locks (then nothing can tell a live writer from a dead one)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        return True
    except OSError:
        return False


@contextlib.contextmanager
def partial(parent: Path, name: str, *, directory: bool = False) -> Iterator[Path]:
    """A new temporary file (or directory) for ``name`` in ``parent``, to fill and then move into place
    within the block; removed when the block ends, whatever ends it (a Ctrl-C, a full disk).

    It is locked for as long as this process lives, so the temporary files of writers that were killed
    outright (SIGKILL, a power loss: no cleanup ran) are told from live ones and removed here, by the next
    writer into ``parent`` (:func:`sweep_partials`).
    """
    parent.mkdir(parents=True, exist_ok=True)
    sweep_partials(parent)
    while True:
        if directory:
            path = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=PARTIAL, dir=parent))
            fd = os.open(path, os.O_RDONLY)
        else:
            fd, made = tempfile.mkstemp(prefix=f".{name}.", suffix=PARTIAL, dir=parent)
            path = Path(made)
        locked = _lock(fd)
        try:
            # a sweeper of another process may have taken it for a dead writer's between its creation
            # and the lock: then make another
            if not locked or os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        os.close(fd)


def sweep_partials(parent: Path) -> None:
    """Remove from ``parent`` the temporary files and directories of :func:`partial` whose writer is gone
    (their lock is free); anything else, and anything whose state cannot be told, is left alone."""
    try:
        entries = [e for e in os.scandir(parent) if _PARTIAL_NAME.fullmatch(e.name)]
    except OSError:
        return
    for entry in entries:
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:  # gone meanwhile, a link, not readable
            continue
        try:
            if not _lock(fd):
                continue  # its writer is alive
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
        finally:
            os.close(fd)


#: (flag or what, path) of the files and directories a command reads
Reads = Sequence[tuple[str, "str | os.PathLike[str] | None"]]

#: every corpus, token directory, tokenizer, ... this process has read (resolved path -> how to name it): an
#: output never replaces one nor goes inside one (:func:`note_input`); kept for the life of the process,
#: so a write late in a command is checked against inputs read after its output was planned
_INPUTS: dict[str, str] = {}


def note_input(path: str | os.PathLike[str] | None, what: str) -> None:
    """Record that this process reads ``path`` (a file or a directory) as ``what`` (``--data``, ``the
    study's corpus``): every later :func:`plan_output` and :func:`write_output` refuses to write it or
    inside it.  Called where corpora and tokenizers are loaded, so no command can forget one."""
    if path is None:
        return
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return
    _INPUTS.setdefault(str(resolved), what)


def noted_inputs() -> list[tuple[str, str]]:
    """(what, path) of every input :func:`note_input` recorded in this process."""
    return [(what, path) for path, what in _INPUTS.items()]


def input_clash(out: Path, reads: Reads) -> str | None:
    """How ``out`` (a file to write) clashes with an input of ``reads`` (flag, path), or None: it is that
    input file, or lies inside that input directory (a new file in a corpus directory joins the corpus;
    one of the same name replaces a document)."""
    try:
        target = out.expanduser().resolve()
    except (OSError, RuntimeError):
        return None
    for flag, source in reads:
        if source is None:
            continue
        src = Path(source).expanduser()
        try:
            if src.is_dir():
                root = src.resolve()
                if target == root or target.is_relative_to(root):
                    return f"is inside {str(source)!r}, the {flag} directory this command reads"
            elif src.exists() and out.exists() and os.path.samefile(out, src):
                return f"is the {flag} file this command reads"
        except OSError:
            continue
    return None


def _refuse_input(shown: str, clash: str) -> UserError:
    return UserError(
        f"{shown}: {clash}; an output never replaces or joins an input, even with --force: choose another "
        "path"
    )


def recorded_inputs(record: Any, whose: str) -> list[tuple[str, str]]:
    """(what, path) of the corpus and tokenizer a record names (a study's ``data`` setting, a checkpoint's
    or an architecture file's ``data``): the inputs a command that never loads them still must not write
    into (a study's report beside its corpus, an export into the corpus it was trained on)."""
    if not isinstance(record, dict):
        record = {"corpus": record} if isinstance(record, str) else {}
    out = []
    for key in ("corpus", "tokenizer"):
        value = record.get(key)
        if isinstance(value, str) and os.sep in value:  # recorded resolved; a bare name is a built-in corpus
            out.append((f"{whose} {key}", value))
    return out


def check_not_input(path: str | os.PathLike[str], what: str, reads: Reads = ()) -> None:
    """Refuse ``path`` (given to ``what``) when it is an input of ``reads`` or of those noted so far, or
    lies inside one: the check of :func:`plan_output`, for a command that learns what it reads after
    planning (a study's corpus, a checkpoint's), made again before any work so a refusal costs nothing."""
    clash = input_clash(Path(path), [*reads, *noted_inputs()])
    if clash is not None:
        raise _refuse_input(f"{what} {str(path)!r}", clash)


def recheck(planned: Sequence[Planned], reads: Reads = ()) -> None:
    """:func:`check_not_input` for each output planned earlier."""
    for p in planned:
        check_not_input(p.path, p.what, reads)


@dataclasses.dataclass(frozen=True)
class Planned:
    """An output path checked at the start, and what a write may replace there."""

    path: Path
    what: str  # the flag that named it, for messages: "--out", "--save"
    replaces: str | None  # SHA-256 of the file there at the start (this tool's, or forced); None: none was
    #: checked against the inputs noted when written (a search's own kept weights are not: binary files
    #: in its runs directory, which a text corpus leaves out, as it leaves out the study's database)
    guard_inputs: bool = True


def sha256_file(path: Path) -> str:
    """The file's SHA-256, hex (how this module knows a file is still the one it wrote)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_dir() -> Path:
    """Where the tool caches what it derived (tokenized corpora, records of files it wrote):
    ``$NAS_CACHE_DIR`` or ``~/.cache/nas-lm``."""
    env = os.environ.get("NAS_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "nas-lm"


def _record(path: Path) -> Path:
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return cache_dir() / "written" / f"{key}.json"


def written_here(path: Path) -> bool:
    """Whether ``path`` holds exactly what this tool last wrote there."""
    try:
        doc = json.loads(_record(path).read_text(encoding="utf-8"))
        return doc.get("path") == str(path.resolve()) and doc.get("sha256") == sha256_file(path)
    except (OSError, ValueError, AttributeError):
        return False


def _remember(path: Path) -> None:
    """Note that this tool wrote ``path`` as it is now (best effort: without a record, a later run
    asks for ``--force``, which is the safe side)."""
    try:
        record = _record(path)
        with partial(record.parent, record.name) as tmp:
            tmp.write_text(json.dumps({"path": str(path.resolve()), "sha256": sha256_file(path)}))
            os.replace(tmp, record)
    except OSError:
        pass


def plan_output(
    path: str | os.PathLike[str],
    what: str,
    *,
    force: bool = False,
    example: str | None = "out",
    replace_own: bool = True,
    kept_weights: bool = False,
    reads: Sequence[tuple[str, str | os.PathLike[str] | None]] = (),
) -> Planned:
    """Check an output path before any work (creates nothing); see the module docstring.

    ``replace_own=False``: even a file this tool wrote needs ``force`` (trained weights: a
    second ``train --save`` onto a kept winner would throw away its training).

    ``kept_weights``: the path is a search's own kept weights (:mod:`nas.search.driver.weights`); any
    other output in a search's weights directory is refused, even with ``force``.

    ``reads``: (flag, path) of the files and directories this command reads (``--arch``, ``--data``), beside
    every input :func:`note_input` recorded: an output is never one of those files nor inside one of those
    directories, even with ``force`` (the command would replace or add to what it is reading).

    ``example``: a file name to suggest when a directory is given (None: the command chose the
    name, as ``plot`` does).  Pass ``path`` as the user typed it: a trailing slash means a directory.
    """
    p = check_file_name(path, what, example)
    shown = f"{what} {str(path)!r}"
    replaces = None
    if p.exists():
        if is_database(p):  # a study's storage (perhaps the one this command reads): never an output
            raise UserError(
                f"{shown}: is an SQLite database (a study's storage, perhaps the one this command reads); "
                "an output never replaces one, even with --force: choose another path"
            )
    clash = input_clash(p, [*reads, *([] if kept_weights else noted_inputs())])
    if clash is not None:
        raise _refuse_input(shown, clash)
    if not kept_weights and kept_weights_dir(
        p.parent
    ):  # a finished trial's weights: the search's record, like its database
        raise UserError(
            f"{shown}: is in {p.parent}, where a search keeps its trials' weights; an output never goes "
            "there, even with --force: choose another path"
        )
    if p.exists():
        own = written_here(p)
        if not (force or (own and replace_own)):
            if own:
                raise UserError(
                    f"{shown}: holds what this tool wrote there earlier (trained weights are never "
                    f"replaced silently); {HINT}"
                )
            raise UserError(
                f"{shown}: a file is there that this tool did not write (or that changed since); {HINT}"
            )
        if not os.access(p, os.W_OK):
            raise UserError(f"{shown}: the file exists and is not writable")
        replaces = sha256_file(p)
    check_writable_dir(p.parent, what, given=str(path))
    return Planned(p, what, replaces, guard_inputs=not kept_weights)


def kept_weights_dir(d: Path) -> bool:
    """``d`` is where a search keeps its trials' weights (``RUNS/STUDY/weights``, or its
    ``storage-HASH`` subdirectory): named so, and holding ``trial_N.safetensors`` files or beside the
    study's database."""
    import re

    try:
        d = d.resolve()
        if not (d.name == "weights" or (d.name.startswith("storage-") and d.parent.name == "weights")):
            return False
        study = d.parent if d.name == "weights" else d.parent.parent
        if d.is_dir() and any(re.fullmatch(r"trial_\d+\.safetensors", f.name) for f in d.iterdir()):
            return True
        return study.is_dir() and any(f.is_file() and is_database(f) for f in study.iterdir())
    except OSError:
        return False


#: the first 16 bytes of every SQLite 3 database file
SQLITE_MAGIC = b"SQLite format 3\x00"


def is_database(path: Path) -> bool:
    """``path`` is an SQLite database, or the write-ahead log or shared memory beside one."""
    if (
        path.name.endswith(("-wal", "-shm", "-journal"))
        and path.with_name(path.name.rsplit("-", 1)[0]).exists()
    ):
        return is_database(path.with_name(path.name.rsplit("-", 1)[0]))
    try:
        with path.open("rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def _mode_for(path: Path) -> int:
    """The permissions a file written at ``path`` gets: the replaced file's own, or, for a new file,
    what ``open()`` gives under the process's umask (0644 under the usual 022)."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_output(target: Planned | str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Write ``target`` through ``write(temporary_path)`` under the rule above; returns the path.

    A plain path (library use: ``nas.save_arch``, ``save_checkpoint``) is written atomically
    over whatever is there: the caller decided; a command's outputs are :class:`Planned`.
    """
    planned = target if isinstance(target, Planned) else None
    p = planned.path if planned is not None else Path(target)
    shown = f"{planned.what if planned is not None else 'output'} {str(p)!r}"
    clash = input_clash(p, noted_inputs()) if planned is not None and planned.guard_inputs else None
    if clash is not None:  # an input read after the output was planned (a corpus the study recorded)
        raise _refuse_input(shown, clash)
    with partial(p.parent, p.name) as tmp:
        try:
            write(tmp)
        except Exception as err:
            full = no_room(err)  # torch.save raises a RuntimeError whose context is the OSError
            if full is None or planned is None:
                raise
            kept = "the earlier file is intact" if p.exists() else "nothing was written"
            raise UserError(f"{shown}: no room to write it ({full.strerror}); {kept}") from None
        os.chmod(tmp, _mode_for(p))  # mkstemp's file is private (0600): give it what a plain open would
        with held():  # a Ctrl-C between the move and the record would leave a file the next run refuses
            _move_into_place(tmp, planned, p, shown)
            _remember(p)
    return p


def _move_into_place(tmp: Path, planned: Planned | None, p: Path, shown: str) -> None:
    if planned is None:
        os.replace(tmp, p)
        return
    appeared = f"{shown}: a file appeared there while this ran; it is left as it is ({HINT})"
    if planned.replaces is None:
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
        if not p.is_file() or sha256_file(p) != planned.replaces:
            raise UserError(f"{shown}: the file there changed while this ran; it is left as it is ({HINT})")
        os.replace(tmp, p)
