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


def test_a_signal_inside_held_takes_effect_when_the_block_ends(sigint_raises: None) -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with held():
            signal.raise_signal(signal.SIGINT)
            steps.append("after the signal")  # the block runs to its end
        steps.append("after the block")
    assert steps == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_the_garbage_collector_swallowed_still_stops_train(tmp_path: Path) -> None:
    """Raised inside a ``__del__``, a signal's exception is printed by Python and dropped: training went on
    to its last step.  The training loop raises it again at its next step (``nas.interrupts``)."""
    code_ = (
        "import signal, sys\n"
        "import evaluators.loop as loop\n"
        "real, steps = loop.train_batch, []\n"
        "class Collected:\n"
        "    def __del__(self):\n"
        "        signal.raise_signal(signal.SIGINT)\n"  # the handler runs here, inside __del__
        "def train_batch(*args):\n"
        "    steps.append(1)\n"
        "    if len(steps) == 2:\n"
        "        Collected()\n"
        "        print('SWALLOWED', file=sys.stderr, flush=True)\n"
        "    return real(*args)\n"
        "loop.train_batch = train_batch\n"
        "import nas.cli\n"
        "code = nas.cli.main(sys.argv[1:])\n"
        "print('steps', len(steps), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    proc = start_python(
        code_,
        *("train", "--arch", "vanilla", "--budget.steps", "50", "--save", str(tmp_path / "m.pt")),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    _, err = proc.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and "SWALLOWED" in err, err
    assert lines[-2:] == ["interrupted", "steps 2"], err  # stopped at the next step, not after 50
    assert list(tmp_path.iterdir()) == []  # no model saved from a run the user stopped
