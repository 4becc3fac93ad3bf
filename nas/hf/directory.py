"""The export's directory: checked before any work, filled in a temporary sibling, then moved into place.

A user's files are never lost (nas.files.outputs' rule for directories), and even with ``--force``
the directory is never a search's nor where the export would replace what it reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nas.errors import UserError
from nas.files.outputs import Reads

#: files every export writes (the rest are the tokenizer's and the remote code's): checked before any work
ALWAYS_WRITTEN = ("config.json", "generation_config.json", "model.safetensors", "README.md")


def plan_dir(path: str, what: str, *, force: bool, keep: tuple[str, ...] = ()) -> Path:
    """Check an output directory before any work: refused when it is a file, a link to nothing, or holds
    files and ``force`` is not given (nas.files.outputs' rule for directories: a user's files are never lost).
    Even with ``force`` it is never a study's directory (its database), a runs directory, a directory
    inside a study's (its kept weights), nor where a file it writes is one of ``keep`` (the checkpoint
    being exported: replacing it would lose the very weights the export reads)."""
    from nas.files.outputs import HINT
    from nas.validate import check_writable_dir

    p = Path(path).expanduser()
    if p.is_symlink() and not p.exists():
        raise UserError(
            f"{what} {path!r} is a link to {os.readlink(p)!r}, which does not exist; give a directory"
        )
    if p.exists() and not p.is_dir():
        raise UserError(f"{what} {path!r} is a file; give a directory to write the model into")
    study = _study_dir(p)
    if study is not None:
        raise UserError(
            f"{what} {path!r} is {study}; the model is never written among a search's files, even with "
            "--force: give a new directory"
        )
    for name in ALWAYS_WRITTEN if p.is_dir() else ():
        if any(_same_file(p / name, k) for k in keep):
            raise UserError(
                f"{what} {path!r}: the export would replace {p / name}, the checkpoint it exports, even with "
                "--force; give another directory"
            )
    check_dir_reads(p, what, [("--checkpoint", k) for k in keep])
    if p.is_dir() and any(p.iterdir()) and not force:
        raise UserError(
            f"{what} {path!r} is a directory that holds files; give a new or empty one, or {HINT} "
            "(files of the same names are replaced, others kept)"
        )
    check_writable_dir(p, what)  # the nearest existing ancestor: a link to nothing on the way, read-only
    return p


#: the names an export may write besides ALWAYS_WRITTEN (a tokenizer's files, the bundled modeling code)
MAY_WRITE = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "modeling_nas.py")


def check_dir_reads(p: Path, what: str, reads: Reads = (), names: Sequence[str] = ()) -> None:
    """Refuse, even with ``--force``, an export directory inside an input directory (a corpus: the export's
    files would join it) or where a file it writes (``names``: those written; by default every name an
    export may write) is an input file (a tokenizer, a checkpoint): nas.files.outputs' rule
    (:func:`nas.files.outputs.check_not_input`, against ``reads`` and every input this process noted)."""
    from nas.files.outputs import check_not_input

    for name in names or (*ALWAYS_WRITTEN, *MAY_WRITE):
        check_not_input(p / name, f"{what} {str(p)!r}: the export's file", reads)


def _same_file(a: Path, b: str | os.PathLike[str]) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _study_dir(p: Path) -> str | None:
    """What ``p`` is when it is a search's: a study's directory (an SQLite database in it), a runs
    directory (a directory in it holding one) or a study's ``weights`` directory."""
    from nas.files.outputs import is_database, kept_weights_dir

    def databases(d: Path) -> list[Path]:
        try:
            found = [f for f in d.iterdir() if f.is_file() and is_database(f)]
        except OSError:
            return []
        return sorted(found, key=lambda f: (f.name.endswith(("-wal", "-shm", "-journal")), f.name))

    if not p.is_dir():
        return None
    if own := databases(p):
        return f"a study's directory (it holds {own[0].name})"
    try:
        inner = [d for d in p.iterdir() if d.is_dir() and databases(d)]
    except OSError:
        inner = []
    if inner:
        return f"a runs directory (its {inner[0].name}/ holds a study)"
    if kept_weights_dir(p):
        return "the directory where a search keeps its trials' weights"
    return None


class written_dir:  # noqa: N801 (used as a context manager, like a function)
    """Fill a temporary sibling of ``out``, then move it into place: a new or empty ``out`` is
    renamed over at once (readers see all or nothing); with ``force`` into a directory holding
    files, each file replaces its namesake (others kept), never a database nor one of ``keep`` (the
    checkpoint read).  ``out`` a link to a directory: that directory.  Removed if the block raises.
    ``written``: the names of the files written, once the block is done."""

    def __init__(self, out: Path, force: bool, keep: tuple[str, ...] = ()) -> None:
        self.out, self.force, self.keep = out, force, keep
        self.written: list[str] = []

    def __enter__(self) -> Path:
        from nas.files.outputs import partial

        self.target = self.out.resolve() if self.out.is_symlink() else self.out  # the directory a link names
        self.partial = partial(self.target.parent, self.target.name, directory=True)
        self.tmp = self.partial.__enter__()
        return self.tmp

    def __exit__(self, kind: Any, err: Any, tb: Any) -> None:
        from nas.files.outputs import is_database
        from nas.interrupts import held

        out = self.target
        try:
            if kind is not None:
                return
            os.chmod(self.tmp, 0o755)  # mkdtemp's directory is private, and some files the library writes
            umask = os.umask(0)
            os.umask(umask)
            names = sorted(f.name for f in self.tmp.iterdir())
            check_dir_reads(out, "--hf", names=names)  # again, with the names written: nothing moved yet
            for name in names:
                os.chmod(self.tmp / name, 0o666 & ~umask)  # what a plain open() gives
            if out.is_dir() and any(out.iterdir()):
                if not self.force:
                    raise UserError(f"{out}: files appeared there while this ran; they are left as they are")
                for name in names:  # checked before any is moved: all or nothing
                    there = out / name
                    if there.exists() and (
                        is_database(there) or any(_same_file(there, k) for k in self.keep)
                    ):
                        which = "a database" if is_database(there) else "the checkpoint it exports"
                        raise UserError(
                            f"{there}: the export would replace it ({which}), even with --force; nothing "
                            "was written"
                        )
                with held():  # a Ctrl-C half-way would leave the old export mixed with the new
                    for name in names:
                        os.replace(self.tmp / name, out / name)
            else:
                if out.is_dir():
                    out.rmdir()  # empty: replaced by the whole new one
                os.replace(self.tmp, out)
            self.written = names
        finally:
            self.partial.__exit__(None, None, None)  # removes what is left of the temporary directory
