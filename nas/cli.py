"""Command line: ``nas COMMAND ...`` (the console script), or ``python run_search.py COMMAND ...``.

Each command lives in ``nas/commands/<name>.py`` with ``register(subparsers)``
adding its parser and setting ``func``.  User mistakes raise
:class:`nas.errors.UserError`; they end here as one line on stderr, exit 2.
Hints that name a command to run next use :func:`nas.program.prog_name`: what the user ran.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import Any

from nas.errors import UserError
from nas.interrupts import Terminated, held, stops_unwind
from nas.program import prog_name
from nas.redact import redacted_output

COMMANDS = ("search", "train", "best", "show", "plot", "export", "confirm", "ladder", "probe")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage text is one ``--help`` away)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Python 3.11's argparse takes `-1e-3` for an option (`--recipe.lr -1e-3`: "expected one
        # argument"), as it only knows `-1` and `-.5` for numbers; 3.13 widened its rule the same way.
        # No flag here looks like a negative number, so any of them is a value; so are -inf and -nan,
        # which float() reads (`--scale -inf` was "expected one argument", not the flag's own check).
        self._negative_number_matcher = re.compile(
            r"^-((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|inf|infinity|nan)$", re.IGNORECASE
        )

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone (one of COMMANDS).

    A command's module imports what it runs (the trainer, torch, Ray) at import time, so
    ``best`` would pay for ``train``'s imports if every command were registered on every call.
    """
    parser = _Parser(
        prog=prog_name(),
        description="Neural-architecture search for Transformer language models. "
        "With no command, runs the demo search (default space, default corpus, local Ray).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS if command not in COMMANDS else (command,):
        module = importlib.import_module(f"nas.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (
        [],
        ["search"],
    ):  # the demo: the shipped default space, whose spec sets its trials and hurdles
        argv = ["search", "--demo"]
    with redacted_output(argv), stops_unwind():  # a storage URL's password is never printed (nas.redact)
        try:
            # a Ctrl-C inside the imports of torch and NumPy left them half-imported: a later import then
            # failed ("cannot load module more than once") or the Ctrl-C was swallowed and the command ran on
            with held():
                parser = build_parser(argv[0])
            args = parser.parse_args(argv)
            if getattr(args, "func", None) is None:
                parser.print_help()
                return 2
            code = int(args.func(args) or 0)
            sys.stdout.flush()  # a reader that went away (`best | head`) shows here, inside the try
            return code
        except BrokenPipeError:
            # the reader of our output closed it: stop quietly, as `cat` does (128 + SIGPIPE), and point
            # stdout at nothing so that the interpreter's last flush does not raise again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except Terminated as stop:  # SIGTERM: everything unwound as for Ctrl-C (nas.interrupts)
            print(f"terminated ({signal.Signals(stop.signum).name})", file=sys.stderr)
            return 128 + stop.signum
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except Exception as err:  # noqa: BLE001 - only a fault of the machine is turned into one line
            line = machine_fault(err)
            if line is None:
                raise
            print(f"error: {line}", file=sys.stderr)
            return 2


def machine_fault(err: BaseException) -> str | None:
    """One line for an error the machine caused (a full disk, a file-size limit), or None.

    What the tool writes is atomic (nas.files.outputs, the caches) and the study records each
    finished trial as it ends, so such a stop loses no finished work; the line says so.
    """
    from nas.files.outputs import causes, no_room

    full = no_room(err)
    if full is not None:
        where = f" ({full.filename})" if full.filename else ""
        return (
            f"no room left to write{where}: {full.strerror}; free some space and run the same command "
            "again (finished trials and files already written are kept)"
        )
    for cause in causes(err):  # SQLite says it in words only
        text = str(cause)
        if "database or disk is full" in text or "disk I/O error" in text:
            what = (
                "is full"
                if "is full" in text
                else ("failed (disk I/O error: a full disk, a file-size limit or a bad disk)")
            )
            return (
                f"writing the study database {what}; free some space and run the same command again "
                "(finished trials are kept)"
            )
    return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
