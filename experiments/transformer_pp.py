#!/usr/bin/env python
"""The experiment behind docs/RESULTS.md's Transformer++ section: does anything beat Transformer++?

Vanilla, Primer-EZ, Transformer++ (rope, rmsnorm, swiglu), Transformer++ with Primer's changes
(``mdha`` kernel 3, squared ReLU) and the best of a search over today's components, all at the shape
and compute of the Primer/Synthesizer experiment.  Nothing but ``run_search.py`` commands, each
resumable (finished work is never redone):

1. ``search``: ``experiments/spaces/modern.yaml`` (``search_spaces/modern.yaml``'s menu at d_model
   128, 4 layers, context 128, 5e12 FLOPs per candidate; 24 trials, NSGA-II, hurdles), the study in
   ``experiments/runs/modern/study.db``.
2. ``export``: its lowest-loss trial to ``examples/archs/found_modern.yaml``.
3. ``confirm``: its winner (``--top 1``) and the four fixed architectures retrained at 1x (seeds 0, 1,
   2) and 4x (seeds 0, 1) the search's FLOPs, the study ``modern-confirm`` beside the search.
4. ``report``: confirm's Markdown reports and the search's ``best`` tables pasted into RESULTS.md's
   generated sections (the prose around them is written by hand).

Run::

    .venv/bin/python experiments/transformer_pp.py                 # all stages
    .venv/bin/python experiments/transformer_pp.py --stage confirm --scale 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "experiments"))

import _doc  # noqa: E402
from primer_synthesizer import DOC, IMG, RUNS, THREADS, cli, pasted, run, shown  # noqa: E402

SPACE = "experiments/spaces/modern.yaml"
STUDY = "modern"
BASELINES = ("vanilla", "primer_ez", "transformer_pp", "transformer_pp_primer")
#: scale: seeds
SEEDS = {1: 3, 4: 2}


def search_cmd() -> list[str]:
    return cli(*f"search --space {SPACE} --study {STUDY} --runs-dir {RUNS} --seed 0".split())


def confirm_cmd(scale: int, report: bool = False) -> list[str]:
    baselines = "".join(f" --baseline examples/archs/{f}.yaml" for f in BASELINES)
    out = f" --report docs/img/results_{STUDY}_{scale}x.md" if report else ""
    return cli(
        *f"confirm --study {STUDY} --runs-dir {RUNS} --top 1 --seeds {SEEDS[scale]} --scales {scale}"
        f"{baselines} --workers 2 --cpus-per-trial {THREADS} --no-tensorboard{out}".split()
    )


def stage_search(args: argparse.Namespace) -> None:
    run(search_cmd())


def stage_export(args: argparse.Namespace) -> None:
    run(
        cli(
            *f"export --study {STUDY} --runs-dir {RUNS} --best --out examples/archs/found_{STUDY}.yaml "
            "--force".split()
        )
    )


def stage_confirm(args: argparse.Namespace) -> None:
    for scale in args.scale or (1, 4):
        run(confirm_cmd(scale))
    run(
        cli(
            *f"export --study {STUDY} --runs-dir {RUNS} --confirmed "
            f"--out examples/archs/confirmed_{STUDY}.yaml --force".split()
        )
    )


def stage_report(args: argparse.Namespace) -> None:
    for scale in args.scale or (1, 4):
        cmd = confirm_cmd(scale, report=True)
        run(cmd)  # every run is in the study by now: this only writes the report
        body = f"    {shown(cmd)}\n\n{pasted(IMG / f'results_{STUDY}_{scale}x.md')}"
        _doc.write_section(f"confirm-{STUDY}-{scale}x", body, DOC)
    study = f"--study {STUDY} --runs-dir {RUNS}"
    cmds = [cli(*f"best {study}".split()), cli(*f"best {study} --by-layer --top 8".split())]
    outputs = [run(cmd) for cmd in cmds]
    body = "\n\n".join(
        f"    $ {shown(cmd)}\n\n```\n{out.rstrip()}\n```" for cmd, out in zip(cmds, outputs, strict=True)
    )
    _doc.write_section(f"search-{STUDY}", f"    {shown(search_cmd())}\n\n{body}", DOC)


STAGES = {"search": stage_search, "export": stage_export, "confirm": stage_confirm, "report": stage_report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=[*STAGES, "all"], default="all")
    parser.add_argument(
        "--scale",
        type=int,
        action="append",
        choices=sorted(SEEDS),
        help="confirm/report only this scale (repeatable; default: 1 then 4)",
    )
    args = parser.parse_args()
    for name, fn in STAGES.items():
        if args.stage in (name, "all"):
            fn(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
