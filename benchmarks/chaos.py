#!/usr/bin/env python
"""Chaos run: a real search on a local Ray while its worker processes are killed at random.

A search of ``--trials`` candidates (a tiny space, real training for
``--steps`` steps on a generated corpus, ``--workers`` Ray actors) runs while
a thread SIGKILLs a random busy worker process every 1 to 4 s, ``--kills``
times.  Afterwards the study is checked: every requested trial finished
(COMPLETE, PRUNED, or FAIL with a reason), none RUNNING, every COMPLETE
trial's values equal to the metrics its worker measured.  It also records on
which addresses the local Ray's processes listened (``ss -ltnp``).  Run::

    .venv/bin/python benchmarks/chaos.py [--trials 20] [--kills 8] [--workers 2] [--no-write]

It prints a markdown table and replaces its own section of docs/reliability.md
(between the ``chaos`` HTML comments).

``--soak`` runs the long version instead: ``--trials`` (default 200) short
``sleep`` trials through the real ``run_search.py`` in a process group of its
own, while trial workers are SIGKILLed at random and the driver itself is
SIGKILLed and started again ``--driver-kills`` times (default 3).  It checks
that the study ends with exactly that many finished trials, none RUNNING and
no finished trial run twice, and writes the ``soak`` section.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from benchmarks._chaos import WorkerKiller  # noqa: E402
from benchmarks._soak import family, soak  # noqa: E402
from nas.cli import build_parser  # noqa: E402
from nas.commands.search import build_run  # noqa: E402
from nas.search.driver.inflight import default_pool  # noqa: E402
from nas.search.driver.loop import Driver  # noqa: E402

SECTION = "chaos"
DOC = ROOT / "docs" / "reliability.md"
SPACE = """\
name: chaos
globals: {d_model: [16, 32], n_heads: 2, n_layers: [1, 2], max_len: 32}
layers:
  attention: {mha: {}, mdha: {kernel: [2, 3]}, synth_random: {}, synth_dense: {}}
  ffn: {activation: [relu, squared_relu, gelu], mult: [2, 4]}
recipe: {batch_size: 8, eval_batches: 2, log_every: 5}
"""
WORDS = "the king and queen of a castle went to see what every lord would say in spring".split()


def listening() -> list[str]:
    """``address:port (process)`` of every listening TCP socket of this driver and the Ray it started.

    Other Rays on the machine (other users' tests) are not this search's and are left out.
    """
    ours = family(os.getpid())
    try:
        out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ["(ss not available)"]
    rows = []
    for line in out.splitlines():
        fields = line.split()
        found = re.search(r"pid=(\d+)", line)
        if len(fields) < 4 or found is None:
            continue
        pid = int(found.group(1))
        if pid not in ours:
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        name = "this driver" if pid == os.getpid() else _program(words)
        rows.append(f"{fields[3]} ({name})")
    return rows


def _program(words: list[str]) -> str:
    """A short name: ``ray::IDLE``, ``raylet``, ``gcs_server``, ``dashboard.py``..."""
    if words[0].startswith("ray::"):
        return words[0].split()[0]
    scripts = [w for w in words if w.endswith(".py")]
    return Path(scripts[0] if scripts else words[0]).name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0, help="training budget per candidate")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    ap.add_argument("--soak", action="store_true", help="the long run: trials, worker and driver kills")
    ap.add_argument("--driver-kills", type=int, default=3, help="--soak: times the driver is SIGKILLed")
    opts = ap.parse_args()
    if opts.soak:
        if opts.trials == 20:
            opts.trials = 200
        table, ok = soak(opts, make_inputs)
        print(table)
        if not opts.no_write:
            write_section(table, "soak")
            print(f"\nwrote the soak section of {DOC.relative_to(ROOT)}")
        return 0 if ok else 1

    with tempfile.TemporaryDirectory(prefix="nas-chaos-") as tmp:
        root = Path(tmp)
        make_inputs(root)
        args = build_parser().parse_args([
            "search", "--space", str(root / "space.yaml"), "--study", "chaos",
            "--runs-dir", str(root / "runs"), "--data", str(root / "corpus"),
            "--trials", str(opts.trials), "--seconds", str(opts.seconds),
            "--workers", str(opts.workers), "--retries", str(opts.retries), "--sampler", "random",
            "--seed", str(opts.seed), "--no-tensorboard",
        ])  # fmt: skip
        settings = build_run(args)
        holder: dict[str, Any] = {}

        def factory(s: Any) -> Any:
            pool = holder["pool"] = default_pool(s)
            holder["sockets"] = listening()
            holder["node_ip"] = getattr(pool, "node_ip", "?")
            return pool

        killer = WorkerKiller(
            lambda: holder.get("pool"), every=(1.0, 4.0), max_kills=opts.kills, seed=opts.seed
        )
        killer.start()
        t0 = time.monotonic()
        try:
            study = Driver(settings, pool_factory=factory).run()
        finally:
            killer.stop()
        wall = time.monotonic() - t0
        pool = holder["pool"]
        study = optuna.load_study(study_name="chaos", storage=settings.storage)
        rows = summarize(study, killer.kills, pool, wall, opts)
    sockets = holder.get("sockets", [])
    table = render(rows, sockets, holder.get("node_ip", "?"), opts)
    print(table)
    if not opts.no_write:
        write_section(table)
        print(f"\nwrote the {SECTION} section of {DOC.relative_to(ROOT)}")
    return 0 if rows["ok"] else 1


def make_inputs(root: Path) -> None:
    """The search space (``root/space.yaml``) and a generated corpus (``root/corpus``)."""
    (root / "space.yaml").write_text(SPACE)
    rng = random.Random(0)
    (root / "corpus").mkdir()
    for i in range(8):
        text = "\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400))
        (root / "corpus" / f"doc{i}.txt").write_text(text)


def summarize(study: optuna.Study, kills: list[int], pool: Any, wall: float, opts: Any) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for t in trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    retried = [t for t in trials if t.user_attrs.get("attempts", 1) > 1]
    reruns = sum(t.user_attrs.get("attempts", 1) - 1 for t in trials)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    intact = all(
        math.isclose(t.values[0], t.user_attrs["val_loss"])
        and math.isclose(t.values[1], t.user_attrs["flops_per_token"])
        for t in complete
    )
    failed = [t for t in trials if t.state == TrialState.FAIL]
    reasons: dict[str, int] = {}
    for t in failed:
        why = t.user_attrs.get("fail_reason", "(none)")
        reasons[why] = reasons.get(why, 0) + 1
    ok = (
        len(trials) == opts.trials
        and states.get("RUNNING", 0) == 0
        and intact
        and all(t.user_attrs.get("fail_reason") for t in failed)
    )
    return {
        "trials": len(trials),
        "states": states,
        "kills": len(kills),
        "deaths": getattr(pool, "deaths", None),
        "given_up": getattr(pool, "given_up", None),
        "retried": len(retried),
        "reruns": reruns,
        "intact": intact,
        "reasons": reasons,
        "wall": wall,
        "ok": ok,
    }


def render(r: dict[str, Any], sockets: list[str], node_ip: str, opts: Any) -> str:
    states = ", ".join(f"{n} {s}" for s, n in sorted(r["states"].items()))
    reasons = "; ".join(f"{n}x {why}" for why, n in r["reasons"].items()) or "-"
    non_loopback = [s for s in sockets if not re.match(r"(127\.0\.0\.1|\[::ffff:127\.0\.0\.1\]|\[::1\]):", s)]
    lines = [
        "### Latest run",
        "",
        f"{opts.trials} trials requested, real training ({opts.seconds:g} s per candidate) on "
        f"{opts.workers} local Ray workers, `--retries {opts.retries}`; a thread SIGKILLed a random busy "
        f"worker process every 1 to 4 s, at most {opts.kills} times. "
        f"Measured {datetime.date.today().isoformat()}, {r['wall']:.0f} s wall clock.",
        "",
        "| what | count |",
        "| --- | ---: |",
        f"| worker processes killed | {r['kills']} |",
        f"| trials whose worker died under them (pool count) | {r['deaths']} |",
        f"| trials run again after a worker death | {r['retried']} ({r['reruns']} re-runs) |",
        f"| workers given up (could not restart) | {r['given_up']} |",
        f"| trials in the study | {r['trials']} |",
        f"| final states | {states} |",
        f"| trials left RUNNING | {r['states'].get('RUNNING', 0)} |",
        f"| COMPLETE values equal to the measured metrics | {'yes' if r['intact'] else 'NO'} |",
        f"| FAIL reasons | {reasons} |",
        "",
        f"Local Ray node address: `{node_ip}`; listening sockets of Ray processes: "
        + (
            f"{len(sockets)}, all on loopback ({', '.join(sorted({_name(x) for x in sockets}))})."
            if sockets and not non_loopback
            else (
                "none found."
                if not sockets
                else f"{len(non_loopback)} not on loopback: "
                + ", ".join(f"`{s}`" for s in non_loopback)
                + "."
            )
        ),
        "",
        f"Verdict: {'PASS' if r['ok'] else 'FAIL'}.",
    ]
    return "\n".join(lines)


def _name(socket_row: str) -> str:
    return socket_row[socket_row.index("(") + 1 : -1]


def write_section(table: str, section: str = SECTION) -> None:
    begin, end = f"<!-- BEGIN {section} -->", f"<!-- END {section} -->"
    text = DOC.read_text() if DOC.exists() else "# Reliability\n"
    block = f"{begin}\n{table}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOC.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
