"""Fuzz the input contract with many more examples than the test suite runs.

Runs the strategies of ``tests/contract_fuzz.py`` (mutated search spaces,
architecture files and flags, each through ``nas.cli.main`` in a fresh
directory, searches with ``--local`` and a proxy evaluator, training one step)
and counts the examples that broke the contract: a traceback, an exception
escaping ``main``, an exit status other than 0 or 2, or an exit 2 that left a
file created or changed.  The table goes into the ``fuzz`` section of
docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/fuzz.py --examples 300
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

import nas.search.driver.loop  # noqa: E402
from benchmarks._doc import provenance, write_section  # noqa: E402
from nas.cli import main  # noqa: E402
from tests.contract_fuzz import Outcome, arch_cases, flag_cases, run_case, space_cases  # noqa: E402

KINDS = {"search spaces": space_cases, "architecture files (train)": arch_cases, "flags": flag_cases}


def fuzz(strategy: object, examples: int, seed: int) -> list[Outcome]:
    """Run ``examples`` cases drawn from ``strategy``; every outcome, kept or broken."""
    outcomes: list[Outcome] = []

    @hypothesis_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy())  # type: ignore[operator]
    def one(case: tuple[list[str], dict[str, object]]) -> None:
        outcomes.append(run_case(*case, main=main))

    one()
    return outcomes


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="examples per kind of input")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()
    local_pool = nas.search.driver.loop.default_pool

    def no_ray(s: object) -> object:
        if not s.spec.resources.local:  # type: ignore[attr-defined]
            raise AssertionError("a fuzz case started the Ray pool")
        return local_pool(s)  # type: ignore[arg-type]

    nas.search.driver.loop.default_pool = no_ray  # type: ignore[assignment]
    rows, broken_lines, t0 = [], [], time.perf_counter()
    for name, strategy in KINDS.items():
        start = time.perf_counter()
        outcomes = fuzz(strategy, args.examples, args.seed)
        codes = collections.Counter(o.rc for o in outcomes)
        broken = [o for o in outcomes if o.broken]
        rows.append(f"| {name} | {len(outcomes)} | {codes.get(0, 0)} | {codes.get(2, 0)} | "
                    f"{codes.get(1, 0)} | {len(broken)} | {time.perf_counter() - start:.0f} s |")  # fmt: skip
        broken_lines += [f"- {name}: `{' '.join(o.argv)}`: {o.broken} ({o.err[:120]})" for o in broken[:5]]
    body = "\n".join([
        "## Fuzzing the input contract (`benchmarks/fuzz.py`)",
        "",
        f"{provenance()} {args.examples} examples per kind, seed {args.seed}; wall clock "
        f"{time.perf_counter() - t0:.0f} s.",
        "",
        "Each example is one mutated input run through `nas.cli.main` in a fresh directory "
        "(`tests/contract_fuzz.py`); *broken* counts a traceback, an exception escaping `main`, an exit "
        "status other than 0 or 2 (1 only for `train` reporting divergence), or an exit 2 that left a file "
        "created or changed.",
        "",
        "| input | examples | exit 0 | exit 2 | exit 1 (diverged) | broken | time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        *(broken_lines or ["No example broke the contract."]),
    ])  # fmt: skip
    print(body)
    if not args.no_write:
        write_section("fuzz", body)


if __name__ == "__main__":
    main_()
