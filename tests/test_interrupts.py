"""Ctrl-C and SIGTERM end every command in one line (``nas.interrupts``, ``nas.cli``).

The writers' side (no temporary file left, the old file kept) is in ``tests/test_outputs.py``; a
search's (trials re-queued) in ``tests/test_driver_stop.py``.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from interpreter import start_python

from nas.interrupts import held


@pytest.mark.parametrize(
    ("sig", "code", "line"), [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated (SIGTERM)")]
)
def test_a_stop_while_the_command_loads_is_one_line(tmp_path: Path, sig: str, code: int, line: str) -> None:
    """The first second of every command imports torch and NumPy: a Ctrl-C there printed a
    ``KeyboardInterrupt`` traceback (or, inside NumPy's import, "cannot load module more than once",
    exit 1, or was swallowed and the command ran on), and SIGTERM left no line at all."""
    code_ = (
        "import sys, time\n"
        "import nas.cli\n"
        "real = nas.cli.build_parser\n"
        "def build_parser(command):\n"
        "    print('LOADING', file=sys.stderr, flush=True)\n"
        "    time.sleep(2)\n"  # the signal arrives here, among the imports
        "    return real(command)\n"
        "nas.cli.build_parser = build_parser\n"
        "sys.exit(nas.cli.main(sys.argv[1:]))\n"
    )
    proc = start_python(
        code_,
        *("best", "--study", "s", "--runs-dir", str(tmp_path)),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background runner may ignore it
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == "LOADING"
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code and err.strip() == line, err


def test_a_signal_inside_held_takes_effect_when_the_block_ends() -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with held():
            signal.raise_signal(signal.SIGINT)
            steps.append("after the signal")  # the block runs to its end
        steps.append("after the block")
    assert steps == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
