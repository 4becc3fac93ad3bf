"""optuna-dashboard reads the same storage: start it on a free loopback port, see the study, stop it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import pytest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command() -> list[str]:
    script = Path(sys.executable).with_name("optuna-dashboard")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from optuna_dashboard._cli import main; sys.exit(main())"]


@pytest.mark.timeout(90)
def test_dashboard_sees_the_study(multi: optuna.Study, runs: Path, tmp_path: Path) -> None:
    pytest.importorskip(
        "optuna_dashboard", reason="optuna-dashboard is not installed (pip install '.[dashboard]')"
    )
    url = f"sqlite:///{runs / 'multi' / 'study.db'}"
    port = _free_port()
    log = (tmp_path / "dashboard.log").open("w+")
    proc = subprocess.Popen(
        [*_command(), url, "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        studies = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    studies = json.load(r)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
        log.seek(0)
        assert studies is not None, f"dashboard did not answer (exit {proc.poll()}):\n{log.read()[-2000:]}"
        names = {s["study_name"]: s for s in studies["study_summaries"]}
        assert "multi" in names
        assert len(names["multi"]["directions"]) == 2
        study_id = names["multi"]["study_id"]
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/api/studies/{study_id}?after=0", timeout=10
        ) as r:
            detail = json.load(r)
        assert len(detail["trials"]) == 10
        assert {"arch_id", "summary", "val_loss"} <= {a["key"] for a in detail["trials"][3]["user_attrs"]}
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
    assert proc.returncode is not None
