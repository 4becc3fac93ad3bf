"""PostgreSQL for real: a server started by the tests themselves (the ``pgserver`` wheel, in ``.[dev]``).

One server for the test session, one fresh database per test.  Searches run
with ``--local`` (the storage is what is under test, not Ray).  Skipped only
when the server cannot be started here, with the reason.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from nas.cli import build_parser, main
from nas.commands.search import build_run
from nas.search.driver.loop import Driver
from nas.search.storage.urls import open_storage
from tests.search.test_lease import check_concurrent_acquisition, check_recreated_study_is_not_blocked

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A PostgreSQL server for the session (its data under a temporary directory), stopped at the end."""
    pgserver = pytest.importorskip("pgserver", reason="pgserver is not installed (pip install -e '.[dev]')")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[dev]')")
    try:
        server = pgserver.get_server(tmp_path_factory.mktemp("pg"), cleanup_mode="stop")
    except Exception as err:  # noqa: BLE001 - no way to run postgres on this machine
        pytest.skip(f"cannot start a PostgreSQL server here: {err}")
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def pg_url(postgres: Any) -> str:
    """A new, empty database on the session's server."""
    name = f"t{uuid.uuid4().hex[:12]}"
    postgres.psql(f"CREATE DATABASE {name};")
    base, _, query = postgres.get_uri().partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}?{query}"


def argv_for(url: str, corpus: Path, *extra: str) -> list[str]:
    return ["search", "--space", str(TINY_SPACE), "--study", "s", "--storage", url, "--data", str(corpus),
            "--local", "--sampler", "random", "--no-tensorboard", *extra]  # fmt: skip


def start(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run_search.py"), *argv],
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_running(proc: subprocess.Popen[str], url: str) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.RDBStorage(url)  # one pool: a new one per poll would exhaust the server
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            trials = optuna.load_study(study_name="s", storage=storage).trials
        except Exception:  # noqa: BLE001 - not created yet
            continue
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        if done and any(t.state == TrialState.RUNNING and "arch" in t.user_attrs for t in trials):
            storage.engine.dispose()
            return trials
    storage.engine.dispose()
    pytest.fail(f"no trial ran: {proc.communicate(timeout=60)[1][-2000:] if proc.poll() is not None else ''}")


@pytest.mark.timeout(300)
def test_search_lease_and_resume_after_sigkill(tmp_path: Path, text_corpus: Path, pg_url: str) -> None:
    argv = argv_for(pg_url, text_corpus, "--trials", "3", "--evaluator", "sleep:3")
    first = start(argv, tmp_path)
    try:
        wait_running(first, pg_url)
        second = subprocess.run(
            [sys.executable, str(ROOT / "run_search.py"), *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        os.kill(first.pid, signal.SIGKILL)
        first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert second.returncode == 2 and f"PID {first.pid}, last heartbeat" in second.stderr, second.stderr
    study = optuna.load_study(study_name="s", storage=pg_url)
    finished = {t.number: t.values for t in study.trials if t.state == TrialState.COMPLETE}
    running = [t.number for t in study.trials if t.state == TrialState.RUNNING]
    assert finished and running  # the refused driver touched nothing; the killed one left its trial

    out = io.StringIO()
    Driver(build_run(build_parser().parse_args(argv)), out=out).run()
    assert (
        f"took over the study from a driver that is gone (host {socket.gethostname()}, PID {first.pid}"
        in out.getvalue()
    )
    trials = optuna.load_study(study_name="s", storage=pg_url).trials
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    for number, values in finished.items():
        assert trials[number].values == values
    for number in running:
        assert trials[number].user_attrs["requeued_as"]
        reruns = [t.params for t in trials if t.user_attrs.get("requeued_from") == number]
        # the rerun keeps every choice the killed trial had made; a kill that landed while it was still
        # sampling (its choices are stored one by one) leaves the rest to the sampler
        assert len(reruns) == 1 and trials[number].params.items() <= reruns[0].items(), reruns
    assert len([t for t in trials if not t.user_attrs.get("requeued_as")]) == 3


@pytest.mark.timeout(300)
def test_drivers_starting_at_once_are_serialized(pg_url: str) -> None:
    # Four drivers take the lease at the same moment, on a database without the lease table
    # (they race to create it), then without a row, then with a gone holder's row: one wins each time.
    optuna.create_study(study_name="s", storage=pg_url)
    storage = open_storage(pg_url)
    try:
        check_concurrent_acquisition(storage, lambda: open_storage(pg_url))
        check_recreated_study_is_not_blocked(storage)
    finally:
        storage.engine.dispose()


@pytest.fixture
def searched(tmp_path: Path, text_corpus: Path, pg_url: str) -> str:
    """A finished 4-trial study ``s`` in a fresh PostgreSQL database; its URL."""
    assert main(argv_for(pg_url, text_corpus, "--trials", "4", "--evaluator", "proxy:params")) == 0
    return pg_url


def test_best_and_export_read_the_study(searched: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["best", "--study", "s", "--storage", searched, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows
    out = tmp_path / "best.yaml"
    assert main(["export", "--study", "s", "--storage", searched, "--best", "--out", str(out)]) == 0
    exported = yaml.safe_load(out.read_text())
    study = optuna.load_study(study_name="s", storage=searched)
    best = min((t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.values[0])
    assert exported["arch"] == best.user_attrs["arch"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_the_dashboard_reads_the_study(searched: str, tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("optuna-dashboard")
    command = (
        [str(script)]
        if script.is_file()
        else [sys.executable, "-c", "import sys; from optuna_dashboard._cli import main; sys.exit(main())"]
    )
    port = _free_port()
    log = (tmp_path / "dashboard.log").open("w+")
    proc = subprocess.Popen(
        [*command, searched, "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        studies = None
        deadline = time.monotonic() + 60
        while studies is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=5) as r:
                    studies = json.load(r)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
        log.seek(0)
        assert studies is not None, f"dashboard did not answer (exit {proc.poll()}):\n{log.read()[-2000:]}"
        summary = {s["study_name"]: s for s in studies["study_summaries"]}["s"]
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}?after=0", timeout=10
        ) as r:
            detail = json.load(r)
        assert len(detail["trials"]) == 4
        assert {"arch_id", "val_loss"} <= {a["key"] for a in detail["trials"][0]["user_attrs"]}
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
