"""What the cluster cannot hold is refused or capped at once; SIGTERM to the process group exits 143.

The end-to-end cases run the real ``run_search.py`` in a process of its own
(its own local Ray where one is started), as a user or a scheduler would.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from nas.errors import UserError
from nas.execution.capacity import check_trial_resources, fit_local_workers

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


def run_search(tmp_path: Path, corpus: Path, *extra: str, **popen: object) -> subprocess.Popen[str]:
    argv = [sys.executable, str(ROOT / "run_search.py"), "search", "--space", str(TINY_SPACE), "--study", "s",
            "--runs-dir", str(tmp_path / "runs"), "--data", str(corpus), "--sampler", "random",
            "--no-tensorboard", *extra]  # fmt: skip
    return subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )  # type: ignore[call-overload]


def refused(tmp_path: Path, corpus: Path, *extra: str) -> str:
    """Run a search that must be refused: exit 2, one line, no traceback, nothing written; the line."""
    proc = run_search(tmp_path, corpus, *extra)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 2, (out, err)
    lines = [x for x in err.splitlines() if not x.startswith(("WARNING", "20"))]  # Ray's own start-up notes
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert not (tmp_path / "runs" / "s" / "study.db").exists()
    return lines[0]


@pytest.mark.parametrize(
    "cpus, gpus, words",
    [
        (1e-9, 0.0, "--cpus-per-trial 1e-09 is too small"),
        (1.0, 1e-9, "--gpus-per-trial 1e-09 is too small"),
        (0.001, 0.0, "--cpus-per-trial 0.001 is too small"),
        (1.5, 0.0, "--cpus-per-trial 1.5: above 1 it must be a whole number"),
        (1.0, 2.5, "--gpus-per-trial 2.5: above 1 it must be a whole number"),
    ],
)
def test_resources_ray_cannot_honour_are_refused(cpus: float, gpus: float, words: str) -> None:
    with pytest.raises(UserError, match=words.replace("+", r"\+")):
        check_trial_resources(cpus, gpus)


@pytest.mark.parametrize("cpus, gpus", [(1.0, 0.0), (0.5, 0.25), (2.0, 1.0), (0.01, 2.0)])
def test_resources_ray_can_honour_pass(cpus: float, gpus: float) -> None:
    check_trial_resources(cpus, gpus)


def test_local_workers_are_capped_at_the_machine() -> None:
    assert fit_local_workers(2, 1.0, cpus=2, memory=22e9) == (2, "")
    n, line = fit_local_workers(12, 1.0, cpus=2, memory=22e9)
    assert n == 2
    assert line == "--workers 12: this machine holds 2 (2 CPU(s) at --cpus-per-trial 1); running 2 worker(s)"
    n, line = fit_local_workers(12, 0.01, cpus=2, memory=1.0e9)  # memory binds: 0.3 GB per worker
    assert n == 3 and "1.0 GB of memory available" in line
    assert fit_local_workers(1, 4.0, cpus=4, memory=None) == (1, "")  # one trial wider than the machine runs


def test_tiny_resources_are_refused_before_anything_starts(tmp_path: Path, text_corpus: Path) -> None:
    line = refused(tmp_path, text_corpus, "--cpus-per-trial", "1e-9", "--evaluator", "proxy:params")
    assert "--cpus-per-trial 1e-09 is too small" in line


@pytest.mark.timeout(300)
@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="this machine has a GPU: the request would be honoured"
)
def test_a_gpu_request_without_gpus_is_refused_at_once(tmp_path: Path, text_corpus: Path) -> None:
    # before Ray starts: no CUDA here (or fewer GPUs than asked); a joined cluster is checked once joined
    line = refused(tmp_path, text_corpus, "--gpus-per-trial", "1000", "--evaluator", "proxy:params")
    assert "--gpus-per-trial) 1000: " in line and ("CUDA is not available" in line or "GPU(s)" in line)


@pytest.fixture
def web_server() -> Iterator[int]:
    """An HTTP server on a free loopback port: something that answers, but is not Ray."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_that_is_not_ray_is_refused(tmp_path: Path, text_corpus: Path, web_server: int) -> None:
    address = f"127.0.0.1:{web_server}"
    line = refused(tmp_path, text_corpus, "--address", address, "--evaluator", "proxy:params")
    assert f"--address '127.0.0.1:{web_server}' is not a Ray cluster (it answered '" in line


def test_a_closed_port_is_refused(tmp_path: Path, text_corpus: Path) -> None:
    port = _free_port()
    line = refused(tmp_path, text_corpus, "--address", f"127.0.0.1:{port}", "--evaluator", "proxy:params")
    assert f"cannot reach 127.0.0.1:{port}" in line


@pytest.mark.timeout(120)
def test_sigterm_stops_the_driver_while_it_probes_an_address(tmp_path: Path, text_corpus: Path) -> None:
    # A server that takes connections and never answers: the driver waits for its reply, and a
    # SIGTERM then ends it at once (143), not after the probe gives up (which would be exit 2).
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(120)
        port = server.getsockname()[1]
        address = f"127.0.0.1:{port}"
        proc = run_search(tmp_path, text_corpus, "--address", address, "--evaluator", "proxy:params")
        try:
            server.accept()[0].close()  # the reachability check connects and leaves
            probe, _ = server.accept()  # the gRPC probe: it now waits for an answer
            with probe:
                proc.send_signal(signal.SIGTERM)
                _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(300)
def test_sigterm_to_the_process_group_requeues_and_exits_143(tmp_path: Path, text_corpus: Path) -> None:
    # What `timeout` and batch schedulers do: SIGTERM to the driver and to the local Ray it started,
    # all at once.  Asked for 12 workers on this machine, the driver also says how many it runs.
    proc = run_search(
        tmp_path,
        text_corpus,
        "--trials",
        "20",
        "--evaluator",
        "sleep:2",
        "--workers",
        "12",
        start_new_session=True,
    )
    url = f"sqlite:///{tmp_path / 'runs' / 's' / 'study.db'}"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            try:
                trials = optuna.load_study(study_name="s", storage=url).trials
            except Exception:  # noqa: BLE001 - not created yet
                continue
            if any(t.state == TrialState.COMPLETE for t in trials) and any(
                t.state == TrialState.RUNNING and "arch" in t.user_attrs for t in trials
            ):
                break
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 60
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _group_alive(proc.pid)  # the local Ray went with the driver
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM received" not in err and "Traceback" not in err and "Aborted" not in err, err
    cpus = os.cpu_count() or 1
    if cpus < 12:
        assert "--workers 12: this machine holds " in out
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    stopped = [t for t in trials if t.user_attrs.get("requeued_as")]
    # a trial being launched when the signal came (between ask and submit) says so
    reasons = {"driver stopped (SystemExit)", "driver stopped while it was being launched"}
    assert stopped and all(t.user_attrs["fail_reason"] in reasons for t in stopped), [
        t.user_attrs["fail_reason"] for t in stopped
    ]


@pytest.mark.slow
def test_a_local_search_prints_no_ray_notice_of_its_own(tmp_path: Path, text_corpus: Path) -> None:
    """Ray's "Token authentication is enabled ... opt out" notice is Ray's, not the user's: not printed."""
    proc = run_search(tmp_path, text_corpus, "--evaluator", "proxy:params", "--trials", "1", "--workers", "1")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert "Token authentication" not in out + err and "WARNING" not in err, err[-2000:]
