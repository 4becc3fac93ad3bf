#!/usr/bin/env python
"""The experiment behind docs/RESULTS.md: Primer-EZ and the Synthesizers against vanilla at equal compute.

Nothing but ``run_search.py`` commands, each resumable (finished work is never redone):

1. ``search``: the shipped ``search_spaces/primer.yaml`` and ``search_spaces/synthesizer.yaml``
   searches, every candidate trained for the same FLOPs.  Studies live in
   ``experiments/runs/<space>/study.db``.
2. ``export``: each search's lowest-loss trial to ``examples/archs/found_<space>.yaml``.
3. ``confirm``: per search, ``confirm`` retrains its winner (``--top 1``) and the fixed
   architectures (``--baseline examples/archs/*.yaml``) for the search's FLOPs on seeds 0, 1, 2, then
   a few of them at four times the FLOPs on seeds 0 and 1 (the study ``<space>-confirm`` beside the
   search), and ``export --confirmed`` writes the architecture each confirmation found best to
   ``examples/archs/confirmed_<space>.yaml``.
4. ``report``: the generated sections of docs/RESULTS.md (the prose around them is written by hand):
   confirm's own Markdown reports (``--report``; the same confirm commands again, which train nothing
   once stage 3 has finished), ``best``, ``best --by-layer`` and ``plot`` of each search.

Run::

    .venv/bin/python experiments/primer_synthesizer.py                # all stages
    .venv/bin/python experiments/primer_synthesizer.py --stage report  # docs only
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402

DOC = ROOT / "docs" / "RESULTS.md"
IMG = ROOT / "docs" / "img"
RUNS = "experiments/runs"
SPACES = ("primer", "synthesizer")
BUDGET = 5e12  # training FLOPs per candidate and per confirm run at scale 1
SEEDS = (0, 1, 2)
#: one thread per confirm run, the two searches' confirmations side by side: on a 2-core machine shared
#: with other work, two 1-thread runs lose far less time to a descheduled thread than one 2-thread run
THREADS = 1
#: per search and scale: (seeds, the fixed architectures confirmed beside its winner)
CONFIRM: dict[str, dict[int, tuple[int, tuple[str, ...]]]] = {
    "primer": {
        1: (3, ("vanilla", "mdha", "squared_relu", "primer_ez")),
        4: (2, ("vanilla", "mdha", "primer_ez")),
    },
    "synthesizer": {
        1: (3, ("vanilla", "synth_dense", "synth_random", "synth_fixed_random", "synth_factorized_random",
                "synth_factorized_dense", "mixture", "multi_branch")),
        4: (2, ("vanilla", "synth_random", "synth_factorized_dense")),
    },
}  # fmt: skip


def cli(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "run_search.py"), *args]


def shown(cmd: list[str]) -> str:
    """The command as a reader types it from the repository root."""
    return shlex.join(["python", "run_search.py", *cmd[2:]])


def run(cmd: list[str]) -> str:
    print("$", shown(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{shown(cmd)}: exit status {proc.returncode}")
    return proc.stdout


def search_cmd(space: str) -> list[str]:
    return cli(
        *f"search --space search_spaces/{space}.yaml --study {space} --runs-dir {RUNS} --trials 24 "
        f"--budget-flops {BUDGET:g} --hurdles 0.25,0.5 --sampler nsga2 --seed 0 "
        "--no-tensorboard".split()
    )


def confirm_cmd(space: str, scale: int, report: bool = False) -> list[str]:
    """The search's winner and its fixed architectures at ``scale`` times the search's budget.

    ``--local``: one run at a time in the command's own process, on ``THREADS`` torch threads.
    ``report``: and write its Markdown report (and plots) to ``docs/img/results_<space>_<scale>x.md``.
    """
    seeds, files = CONFIRM[space][scale]
    baselines = "".join(f" --baseline examples/archs/{f}.yaml" for f in files)
    out = f" --report docs/img/results_{space}_{scale}x.md" if report else ""
    return cli(
        *f"confirm --study {space} --runs-dir {RUNS} --top 1 --seeds {seeds} --scales {scale}"
        f"{baselines} --local --cpus-per-trial {THREADS} --no-tensorboard{out}".split()
    )


def in_parallel(cmds: list[list[str]]) -> None:
    """Run ``cmds`` side by side (each study has its own file); both end before a failure is reported."""
    procs = []
    for cmd in cmds:
        print("$", shown(cmd), file=sys.stderr, flush=True)
        procs.append((cmd, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)))
    for cmd, code in [(cmd, proc.wait()) for cmd, proc in procs]:
        if code != 0:
            raise SystemExit(f"{shown(cmd)}: exit status {code}")


def stage_search() -> None:
    for space in SPACES:
        run(search_cmd(space))  # continues the study up to its 24 trials


def stage_export() -> None:
    for space in SPACES:
        run(
            cli(
                *f"export --study {space} --runs-dir {RUNS} --best --out examples/archs/found_{space}.yaml "
                "--force".split()
            )
        )


def stage_confirm() -> None:
    for scale in (1, 4):  # every search's 1x runs before any 4x run
        in_parallel([confirm_cmd(space, scale) for space in SPACES])
    for space in SPACES:
        run(
            cli(
                *f"export --study {space} --runs-dir {RUNS} --confirmed "
                f"--out examples/archs/confirmed_{space}.yaml --force".split()
            )
        )


def pasted(report: Path) -> str:
    """A confirm report as a section of RESULTS.md: headings two levels down, images under img/."""
    text = report.read_text(encoding="utf-8")
    report.unlink()  # its plots stay in docs/img; the text lives in RESULTS.md only
    text = re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", text, flags=re.M)
    return re.sub(r"\]\((results_[^)]+\.png)\)", r"](img/\1)", text)


def stage_report() -> None:
    for scale in (1, 4):
        for space in SPACES:
            cmd = confirm_cmd(space, scale, report=True)
            run(cmd)  # every run is in the study by now: this only writes the report
            body = f"    {shown(cmd)}\n\n{pasted(IMG / f'results_{space}_{scale}x.md')}"
            _doc.write_section(f"confirm-{space}-{scale}x", body, DOC)
    for space in SPACES:
        study = f"--study {space} --runs-dir {RUNS}"
        cmds = [cli(*f"best {study}".split()), cli(*f"best {study} --by-layer --top 8".split())]
        outputs = [run(cmd) for cmd in cmds]
        run(cli(*f"plot {study} --out docs/img/results_{space}".split()))
        body = "\n\n".join(
            f"    $ {shown(cmd)}\n\n```\n{out.rstrip()}\n```" for cmd, out in zip(cmds, outputs, strict=True)
        )
        pics = "\n".join(
            f"![{p}](img/results_{space}/{p}.png)" for p in ("pareto", "blocks_by_layer", "history")
        )
        _doc.write_section(f"search-{space}", f"    {shown(search_cmd(space))}\n\n{body}\n\n{pics}", DOC)


STAGES = {"search": stage_search, "export": stage_export, "confirm": stage_confirm, "report": stage_report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=[*STAGES, "all"], default="all")
    args = parser.parse_args()
    for name, fn in STAGES.items():
        if args.stage in (name, "all"):
            fn()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
