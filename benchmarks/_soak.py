"""``benchmarks/chaos.py --soak``: a long search whose workers and driver are killed, then the study checked.

The driver is the real ``run_search.py search`` in a process group of its own
(its local Ray with it).  A thread SIGKILLs a random trial worker of that Ray
every 1 to 4 s; when the study has passed each of ``--driver-kills`` evenly
spaced marks, the driver is SIGKILLed (its Ray goes with it: Ray's processes
die with the process that started them, and the rest of the group is killed
too) and the same command is started again at once.  The new driver finds
the dead one's lease (same machine, process gone), takes it over, re-queues
what was left RUNNING and continues.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from benchmarks._chaos import WorkerKiller, is_trial_worker
from benchmarks._doc import command, machine
from nas.search.storage.records import REQUEUED
from nas.search.storage.study import count_done

ROOT = Path(__file__).resolve().parents[1]


def family(root: int) -> set[int]:
    """``root`` and every process below it (the local Ray a driver started: GCS, raylet, workers...)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo += children.get(pid, [])
    return out


def _age(pid: int) -> float:
    """Seconds since process ``pid`` started (0 when unknown)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


class _DriverWorkers:
    """What WorkerKiller needs of a pool: the trial workers below the driver process.

    From outside the driver it cannot be seen which worker runs a trial; a worker
    younger than ``MIN_AGE`` s is left alone, as the in-process chaos run leaves a
    restarting one alone (killing an actor again and again before it has answered
    makes the pool give its slot up, which is a different test).
    """

    MIN_AGE = 3.0

    def __init__(self) -> None:
        self.driver: int | None = None

    def busy_pids(self) -> list[int]:
        driver = self.driver
        if driver is None:
            return []
        return [p for p in family(driver) if is_trial_worker(p) and _age(p) > self.MIN_AGE]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def soak(opts: Any, make_inputs: Callable[[Path], None]) -> tuple[str, bool]:
    """Run the soak search; returns the markdown table and whether every check passed."""
    with tempfile.TemporaryDirectory(prefix="nas-soak-") as tmp:
        root = Path(tmp)
        make_inputs(root)
        url = f"sqlite:///{root / 'soak.db'}"
        argv = [sys.executable, str(ROOT / "run_search.py"), "search", "--space", str(root / "space.yaml"),
                "--study", "soak", "--storage", url, "--data", str(root / "corpus"),
                "--trials", str(opts.trials),
                "--evaluator", "sleep:0.2", "--workers", str(opts.workers), "--retries", "5",
                "--sampler", "random", "--seed", str(opts.seed), "--no-tensorboard"]  # fmt: skip
        marks = [opts.trials * (i + 1) // (opts.driver_kills + 1) for i in range(opts.driver_kills)]
        group = _DriverWorkers()
        killer = WorkerKiller(group, every=(1.0, 4.0), max_kills=10_000, seed=opts.seed)
        killer.start()
        t0 = time.monotonic()
        drivers, driver_kills, rc = 0, 0, None
        try:
            while rc is None:
                proc = subprocess.Popen(
                    argv,
                    cwd=root,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
                drivers += 1
                group.driver = proc.pid
                rc = _drive(proc, url, marks[driver_kills : driver_kills + 1])
                if rc is None:
                    driver_kills += 1
        finally:
            killer.stop()
            group.driver = None
        wall = time.monotonic() - t0
        study = optuna.load_study(study_name="soak", storage=url)
        return _table(study, opts, rc, drivers, driver_kills, len(killer.kills), wall)


def _drive(proc: subprocess.Popen[str], url: str, marks: list[int]) -> int | None:
    """Wait for the driver; SIGKILL it once the study has ``marks[0]`` finished trials (None then)."""
    storage: optuna.storages.RDBStorage | None = None
    while proc.poll() is None:
        time.sleep(0.5)
        if not marks:
            continue
        try:
            storage = storage or optuna.storages.RDBStorage(url)
            done = count_done(optuna.load_study(study_name="soak", storage=storage))
        except Exception:  # noqa: BLE001 - not created yet
            continue
        if done >= marks[0]:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            _kill_group(proc.pid)  # what is left of its Ray
            return None
    _kill_group(proc.pid)
    _, err = proc.communicate()
    if proc.returncode != 0:
        print(err[-3000:], file=sys.stderr)
    return proc.returncode


def _table(
    study: optuna.Study,
    opts: Any,
    rc: int | None,
    drivers: int,
    driver_kills: int,
    worker_kills: int,
    wall: float,
) -> tuple[str, bool]:
    trials = study.get_trials(deepcopy=False)
    counted = [t for t in trials if not t.user_attrs.get(REQUEUED)]
    states: dict[str, int] = {}
    for t in counted:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    finished = [t for t in counted if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)]
    running = [t for t in trials if t.state == TrialState.RUNNING]
    # A finished trial run twice would be a re-run of a trial that had finished, or two re-runs of one.
    reruns: dict[int, int] = {}
    for t in trials:
        if "requeued_from" in t.user_attrs:
            reruns[t.user_attrs["requeued_from"]] = reruns.get(t.user_attrs["requeued_from"], 0) + 1
    by_number = {t.number: t for t in trials}
    twice = [n for n, k in reruns.items() if k > 1 or not by_number[n].user_attrs.get(REQUEUED)]
    retried = sum(t.user_attrs.get("attempts", 1) - 1 for t in trials)
    ok = (
        rc == 0
        and len(finished) == opts.trials
        and not running
        and not twice
        and driver_kills == opts.driver_kills
    )
    rows = [
        ("trials requested", opts.trials),
        ("driver processes started / SIGKILLed", f"{drivers} / {driver_kills}"),
        ("trial workers SIGKILLed", worker_kills),
        ("re-runs after a worker death (attempts)", retried),
        ("trials re-queued after a driver kill (`requeued_as`)", len(trials) - len(counted)),
        ("finished trials (COMPLETE, PRUNED, FAIL not re-queued)", len(finished)),
        ("final states", ", ".join(f"{n} {s}" for s, n in sorted(states.items()))),
        ("trials left RUNNING", len(running)),
        ("finished trials run twice", len(twice)),
        ("last driver's exit status", rc),
    ]
    lines = [
        "### Latest soak run",
        "",
        f"`{command()}`: {opts.trials} `sleep:0.2` trials on {opts.workers} local Ray workers, "
        "`--retries 5`; "
        f"a thread SIGKILLed a random trial worker every 1 to 4 s, and the driver was SIGKILLed "
        f"{opts.driver_kills} times and started again at once. {machine()}; "
        f"{datetime.date.today().isoformat()}, {wall:.0f} s wall clock.",
        "",
        "| what | count |",
        "| --- | ---: |",
        *[f"| {what} | {n} |" for what, n in rows],
        "",
        f"Verdict: {'PASS' if ok else 'FAIL'}.",
    ]
    return "\n".join(lines), ok
