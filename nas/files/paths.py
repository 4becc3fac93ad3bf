"""Where a path a user wrote is read from: one rule for every file and every command.

- A path given on the command line (``--data``, ``--tokenizer``, ``--space``, ``--arch``,
  ``--baseline``, ...) is relative to the working directory, as every command-line tool reads one.
- A path written inside a file (a spec's ``data.corpus`` and ``data.tokenizer``, an architecture
  file's ``data``) is relative to the directory of that file (:func:`in_file`), as docker-compose,
  tsconfig and Hydra read theirs: the file means the same data whichever directory it is run from.
  The directory is the one the file's path names (a link to the file is not followed).
- A path the tool records (a study's spec and settings, what a trial sends a Ray worker, an exported
  file's data) is absolute (:func:`recorded`), so it names the same file from any directory and on a
  worker whose working directory is another one.

Names that are not paths stay names: the shipped corpora ``shakespeare`` and ``shakespeare-reversed``.

Before this rule a path in a file was read relative to the working directory.  A file that worked
that way and would now name another path (the file-relative one is not there, the working
directory's is) is refused in one line that names both and what to write; neither is guessed.

Torch-free to import; :func:`in_file` and :func:`recorded` read the corpus names from
:mod:`nas.data.corpus` when called.
"""

from __future__ import annotations

import os
import sys

from nas.errors import ConfigError

__all__ = ["in_file", "recorded"]


def _is_name(value: str) -> bool:
    from nas.data.corpus import DEFAULT_CORPUS, DEFAULT_PARALLEL

    return value in (DEFAULT_CORPUS, DEFAULT_PARALLEL)


def in_file(value: str | None, file: str | os.PathLike[str], field: str) -> str | None:
    """The absolute path that ``value``, written at ``field`` of ``file``, names: relative to the
    file's directory; ``~`` expanded; a corpus's name and None as they are.

    Refused (a :class:`~nas.errors.ConfigError` naming the file and field) when the file-relative
    path is not there but the same text from the working directory is, which is what the file meant
    before paths in files were read from their own directory.  A path that is in neither place is
    returned file-relative: reading it says it is not found, naming where it was looked for.
    """
    if value is None or not value.strip() or _is_name(value):
        return value  # empty: never the file's directory; the loader refuses it, as an empty --data
    expanded = os.path.expanduser(value)
    if os.path.isabs(expanded):
        return os.path.normpath(expanded)
    base = os.path.dirname(os.path.abspath(file))
    here = os.path.normpath(os.path.join(base, expanded))
    there = os.path.abspath(expanded)
    if here == there:
        return here
    if os.path.exists(here):
        if os.path.exists(there) and not os.path.samefile(here, there):
            # both exist: the rule decides, and the line says which one trains in case the file
            # was written when the working directory's was meant
            print(f"note: {file}: {field} {value} is read relative to the file: {here} (not the "
                  f"working directory's {there})", file=sys.stderr)  # fmt: skip
        return here
    if os.path.exists(there):
        raise ConfigError(
            f"{value} is read relative to this file's directory, where {here} is not there; the working "
            f"directory's {there} is: to use it, write {os.path.relpath(there, base)} (relative to the "
            f"file) or {there}",
            field,
            str(file),
        )
    return here


def recorded(value: str | None) -> str | None:
    """``value`` as a record keeps it: absolute when it names a file or directory here (a link kept,
    not followed); a corpus's name, None and anything that names nothing here as they are."""
    if value is None or _is_name(value) or not os.path.exists(os.path.expanduser(value)):
        return value
    return os.path.abspath(os.path.expanduser(value))
