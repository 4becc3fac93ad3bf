# ruff: noqa: E501  (a table: one case per line reads better than wrapped ones)
"""Inputs an adversarial probe of the CLI found getting past the checks of ``test_bad_input.py``.

Each case held one class of mistake that some command accepted (or turned into a
traceback, or answered by overwriting a file) while another refused it; the case
runs under the same rules: exit 2, one line naming the input, no traceback,
nothing on stdout, nothing created or changed in the case's directory, and the
shared study byte for byte the same.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from nas.cli import main
from tests.test_bad_input import (  # noqa: F401 (fixtures)
    ARCH,
    BASE_FILES,
    SPACE,
    in_case_dir,
    run_case,
    search,
    space,
    study,
    write_files,
)

PROXY = ["--evaluator", "proxy:params"]


def fifo(path: Path) -> None:
    """A named pipe: a path that exists and is writable but is no regular file (as /dev/null is)."""
    os.mkfifo(path)


def someone_elses_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")


def arch_file(extra: str = "") -> dict[str, str]:
    return {"bad.yaml": ARCH + extra}


TRAIN = ["train", "--arch", "arch.yaml", "--steps", "1"]
TRAIN_BAD = ["train", "--arch", "bad.yaml", "--steps", "1"]
EXPORT = ["export", "--study", "s", "--storage", "{url}", "--best"]
CONFIRM = [
    "confirm",
    "--study",
    "s",
    "--storage",
    "{url}",
    "--local",
    "--top",
    "1",
    "--seeds",
    "1",
    "--scales",
    "1",
    "--no-tensorboard",
]


def confirm(*extra: str) -> list[str]:
    return [*CONFIRM, *extra]


def cases() -> list[Any]:
    c: list[Any] = []

    def case(
        id: str, argv: list[str], expect: str | tuple[str, ...], files: dict[str, Any] | None = None
    ) -> None:
        c.append(pytest.param(argv, (expect,) if isinstance(expect, str) else expect, files or {}, id=id))

    # -- output paths that exist but are no regular file (a device: replacing /dev/null breaks the machine)
    case("train-save-a-fifo", [*TRAIN, "--save", "pipe"], ("--save", "pipe", "regular file"), {"pipe": fifo})
    case(
        "export-out-a-fifo-forced",
        [*EXPORT, "--out", "pipe", "--force"],
        ("--out", "pipe", "regular file"),
        {"pipe": fifo},
    )
    case(
        "confirm-report-a-fifo",
        confirm("--report", "pipe"),
        ("--report", "pipe", "regular file"),
        {"pipe": fifo},
    )
    # -- an existing file is never overwritten without --force
    case("train-save-existing-file", [*TRAIN, "--save", "notes.txt"], ("--save", "notes.txt", "--force"))
    # -- a directory named with a trailing slash is a directory, not a file name
    case("export-out-new-dir-slash", [*EXPORT, "--out", "newdir/"], ("--out", "newdir/"))
    # -- two outputs on one path
    case("train-save-same-as-logdir", [*TRAIN, "--logdir", "out", "--save", "out"], ("--save", "--logdir"))
    # -- confirm --report: checked before any run, like every output path
    case("confirm-report-under-a-file", confirm("--report", "notes.txt/r.md"), ("--report", "notes.txt"))
    case("confirm-report-empty", confirm("--report", ""), "--report")
    case(
        "confirm-report-someone-elses-file",
        confirm("--report", "notes.txt"),
        ("--report", "notes.txt", "this tool did not write"),
    )
    # -- an empty value is a mistake, never "use the default"
    case("search-storage-empty", search("--storage", ""), "--storage")
    case("search-runs-dir-empty", search("--runs-dir", ""), "--runs-dir")
    case("best-storage-empty", ["best", "--study", "s", "--storage", ""], "--storage")
    case(
        "confirm-trials-empty",
        ["confirm", "--study", "s", "--storage", "{url}", "--local", "--trial", ""],
        "--trial",
    )
    case("confirm-lrs-empty", confirm("--lrs", ""), "--lrs")
    # -- comma lists with empty items
    case("hurdles-trailing-comma", search("--hurdles", "0.5,"), ("--hurdles", "empty"))
    case("hurdles-empty-item", search("--hurdles", "0.25,,0.5"), ("--hurdles", "empty"))
    # -- a value the library would silently change
    case("population-one", search("--population", "1", "--sampler", "nsga2"), ("--population", "2"))
    case(
        "space-budget-steps-fraction",
        search(),
        ("space.yaml", "budget.steps", "integer"),
        {"space.yaml": space("budget", {"steps": 2.5})},
    )
    case(
        "arch-budget-steps-fraction",
        ["train", "--arch", "bad.yaml"],
        ("bad.yaml", "budget.steps", "integer"),
        arch_file("budget: {steps: 1.5}\n"),
    )
    # -- YAML keys: duplicated (the last one silently won) or not names (a traceback)
    case(
        "space-duplicate-key",
        search(),
        ("space.yaml", "name", "twice"),
        {"space.yaml": space() + "name: other\n"},
    )
    case(
        "arch-duplicate-key",
        TRAIN_BAD,
        ("bad.yaml", "d_model", "twice"),
        {
            "bad.yaml": "arch: {d_model: 16, d_model: 32, n_heads: 2, max_len: 16, layers: [{attention: mha}]}\n"
        },
    )
    case("arch-integer-key", TRAIN_BAD, ("bad.yaml", "'1'", "int"), arch_file("1: 2\n"))
    case("arch-boolean-key", TRAIN_BAD, ("bad.yaml", "'yes'", "bool"), arch_file("yes: 2\n"))
    # -- duplicates in a space, refused for blocks and seed architectures as for numbers
    case(
        "space-duplicate-block",
        search(),
        ("space.yaml", "layers.attention", "twice"),
        {"space.yaml": space("layers.attention", ["mha", "mha"])},
    )
    case(
        "space-duplicate-seed-arch",
        search(),
        ("space.yaml", "seed_archs", "twice"),
        {"space.yaml": space("seed_archs", ["vanilla", "vanilla"])},
    )
    # -- an empty section: refused in a space as in an architecture file
    case(
        "space-recipe-null",
        search(),
        ("space.yaml", "recipe", "mapping"),
        {"space.yaml": space("recipe", None)},
    )
    case(
        "space-budget-null",
        search(),
        ("space.yaml", "budget", "mapping"),
        {"space.yaml": space("budget", None)},
    )
    # -- SQLite URLs: a query string or a file: URI names another file than the one checked
    case(
        "storage-query-on-someone-elses-sqlite",
        search("--storage", "sqlite:///mine.db?cache=shared"),
        ("--storage", "mine.db"),
        {"mine.db": someone_elses_sqlite},
    )
    case(
        "storage-uri-on-someone-elses-sqlite",
        search("--storage", "sqlite:///file:mine.db?uri=true"),
        ("--storage", "mine.db"),
        {"mine.db": someone_elses_sqlite},
    )
    case("storage-read-only-uri", search("--storage", "sqlite:///file:x.db?mode=ro&uri=true"), "--storage")
    case("best-storage-with-query", ["best", "--study", "s", "--storage", "{url}?timeout=5"], "--storage")
    # -- confirm: values the runs cannot take, refused before the confirm study is written
    case("confirm-seeds-1e30", confirm("--seeds", "1" + "0" * 30), "--seeds")
    case("confirm-seeds-1e9", confirm("--seeds", "1000000000"), "--seeds")
    case("confirm-lrs-over-range", confirm("--lrs", "1e39"), "--lrs")
    case("confirm-scales-over-range", confirm("--scales", "1e300"), "--scales")
    case("confirm-scale-listed-twice", confirm("--scales", "1,4,1"), ("--scales", "1 twice"))
    case(
        "confirm-trial-listed-twice", [*CONFIRM[:6], "--seeds", "1", "--trial", "0,0"], ("--trial", "0 twice")
    )
    case(  # the line said "give --arch an architecture file" to a user who typed --baseline
        "confirm-baseline-is-a-space",
        confirm("--baseline", "space.yaml"),
        ("space.yaml", "is a search space", "not an architecture file (a shipped one's name"),
    )
    case(
        "confirm-baseline-other-task",
        confirm("--baseline", "s2s.yaml"),
        ("--baseline", "s2s.yaml", "seq2seq"),
        {
            "s2s.yaml": (
                Path(__file__).resolve().parents[1] / "examples" / "archs" / "seq2seq.yaml"
            ).read_text()
        },
    )
    # -- values that would be recorded but change nothing (issue 36): refused, not recorded
    probes = [a for a in search() if a != "proxy:params"]
    probes[probes.index("--evaluator") + 1 : probes.index("--evaluator") + 1] = ["probes@5"]
    case("search-probes-recipe-flag", [*probes, "--recipe.lr", "0.01"], ("recipe.lr", "probes evaluator"))
    case("search-probes-steps-flag", [*probes, "--steps", "30"], ("--steps", "probes evaluator"))
    # one rule over every setting that has a condition (issue 46): a cooldown shapes wsd's only, whether
    # typed or written in the file (a proxy's recipe and budget are recorded for confirm: a note, below)
    trains = [a for a in search() if a not in ("--evaluator", "proxy:params")]
    case("search-cooldown-under-cosine", [*trains, "--recipe.cooldown_frac", "0.3"],
         ("recipe.cooldown_frac", "recipe.schedule is cosine", "change nothing"))  # fmt: skip
    case("train-cooldown-flag-under-cosine", [*TRAIN, "--recipe.cooldown_shape", "1-sqrt"],
         ("recipe.cooldown_shape", "shapes wsd's cooldown only, and recipe.schedule is cosine"))  # fmt: skip
    case("train-cooldown-in-the-file-under-cosine", TRAIN_BAD,
         ("recipe.cooldown_frac", "recipe.schedule is cosine", "bad.yaml"),
         {"bad.yaml": ARCH + "recipe: {cooldown_frac: 0.4}\n"})  # fmt: skip
    case(
        "search-local-fractional-cpus",
        search("--cpus-per-trial", "1.5"),
        ("--cpus-per-trial", "whole number"),
    )
    # -- a check that trials would fail (the lm evaluator): the flag that caused it is named, not the file
    lm = [a for a in search() if a not in ("--evaluator", "proxy:params")]
    case("search-flag-budget-too-small-names-the-flag", [*lm, "--budget-flops", "10"],
         ("error: --budget.flops (--budget-flops): 10 flops buys less than one training step",))  # fmt: skip
    case("search-rungs-every-trial-would-fail",
         [*lm, "--steps", "8", "--recipe.schedule", "wsd", "--budget.rungs", "0.25", "--recipe.warmup_frac", "0.5"],
         ("budget.rungs", "inside the warmup"))  # fmt: skip
    # -- a rule between sections (budget.rungs needs recipe.schedule: wsd) names the flag that gave the field,
    # else the file: it named neither (`budget.rungs: needs ...`), against docs/spec.md's "Errors"
    case("train-rungs-flag-without-wsd", [*TRAIN, "--budget.rungs", "0.5"],
         ("error: --budget.rungs: needs recipe.schedule: wsd, but it is cosine",))  # fmt: skip
    case("train-file-rungs-without-wsd", TRAIN_BAD, ("error: bad.yaml: budget.rungs: needs recipe.schedule",),
         arch_file("budget: {steps: 8, rungs: [0.5]}\n"))  # fmt: skip
    case("search-rungs-flag-without-wsd", search("--budget.rungs", "0.5"),
         ("error: --budget.rungs: needs recipe.schedule: wsd",))  # fmt: skip
    case("search-file-rungs-flag-schedule", search("--recipe.schedule", "cosine"),
         ("error: space.yaml: budget.rungs: needs recipe.schedule: wsd, but it is cosine",),
         {"space.yaml": yaml.safe_dump({**SPACE, "recipe": {**SPACE["recipe"], "schedule": "wsd"},
                                        "budget": {"steps": 8, "rungs": [0.5]}})})  # fmt: skip
    # -- ladder: checked before the ladder study is written
    ladder = ["ladder", "--study", "s", "--storage", "{url}", "--local", "--no-tensorboard"]
    case("ladder-two-sizes", [*ladder, "--sizes", "1,2"], ("--sizes", "3 sizes or more"))
    case("ladder-rungs-not-increasing", [*ladder, "--rungs", "0.5,0.25"], "--rungs")
    case("ladder-target-flops-negative", [*ladder, "--target-flops", "-5"], "--target-flops")
    case("ladder-report-someone-elses-file", [*ladder, "--report", "notes.txt"],
         ("--report", "notes.txt", "this tool did not write"))  # fmt: skip
    return c


@pytest.mark.parametrize("argv,expect,files", cases())
def test_probe_case(
    argv: list[str],
    expect: tuple[str, ...],
    files: dict[str, Any],
    in_case_dir: Path,  # noqa: F811
    study: dict[str, Any],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_case(argv, expect, files, in_case_dir, study, capsys)


@pytest.mark.parametrize("value", [0.5, 2.5])
def test_a_steps_budget_is_a_whole_number_of_steps(value: float) -> None:
    from nas.errors import ConfigError
    from nas.spec.training import Budget

    with pytest.raises(ConfigError, match="budget.steps: must be a positive integer"):
        Budget("steps", value)
    assert Budget.from_dict({"steps": "1e3"}).value == 1000  # YAML's 1e3 is a string: a whole number


def test_train_force_overwrites_an_existing_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_files(tmp_path, {**BASE_FILES, "model.pt": "old\n"})
    assert main([*TRAIN, "--data", "corpus", "--save", "model.pt", "--force"]) == 0
    assert (tmp_path / "model.pt").read_bytes() != b"old\n"


def test_merge_keys_and_quoted_keys_still_read() -> None:
    from nas.files.yamlsafe import load_yaml

    doc = load_yaml("base: &b {mult: 2, activation: relu}\nffn: {<<: *b, mult: 4}\n'1': one\n")
    assert doc["ffn"] == {"mult": 4, "activation": "relu"} and doc["1"] == "one"


def test_a_proxy_searchs_recipe_and_budget_flags_are_said_to_be_for_confirm(tmp_path, corpus_dir, capsys):
    """No trial of a proxy search trains, yet its recipe and budget are what confirm and ladder train its
    finalists with: kept, and said (they were taken silently, as if they shaped the search)."""
    argv = ["search", "--evaluator", "proxy:params", "--trials", "1", "--local", "--runs-dir", str(tmp_path),
            "--study", "p", "--data", str(corpus_dir), "--no-tensorboard"]  # fmt: skip
    assert main([*argv, "--recipe.lr", "0.01", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    assert "note: recipe.lr, budget.steps (--steps): the proxy:params evaluator trains nothing" in out
    assert "for confirm and ladder" in out
    assert main([*argv, "--trials", "2"]) == 0  # none typed: no note
    assert "note: " not in capsys.readouterr().out
