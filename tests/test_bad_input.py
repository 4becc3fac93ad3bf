# ruff: noqa: E501  (a table: one case per line reads better than wrapped ones)
"""Mistakes a user can make on the command line and in YAML files.

Every case must end with exit status 2, one or two lines on stderr that name
the flag or the file, no traceback, nothing on stdout, and nothing created or
changed: the case's directory lists the same files (sizes and times) before
and after, and the shared study's database is byte for byte the same.

Most cases run in-process through ``nas.cli.main`` (fast); a few run the real
``run_search.py`` in a subprocess.  The worker pool is replaced by one that
fails the test, so a case that slips through validation cannot start Ray.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

import nas.search.driver.loop
from nas.cli import main

ROOT = Path(__file__).resolve().parents[1]

SPACE: dict[str, Any] = {
    "name": "tiny",
    "globals": {"d_model": [16, 32], "n_heads": 2, "n_layers": [1, 2], "max_len": 16},
    "layers": {
        "attention": {"mha": {}, "mdha": {"kernel": [2, 3]}},
        "ffn": {"activation": ["relu", "squared_relu"], "mult": 2},
    },
    "recipe": {"batch_size": 4, "eval_batches": 2},
    "budget": {"steps": 4},
}
ARCH = (
    "arch: {d_model: 16, n_heads: 2, max_len: 16,\n"
    "       layers: [{attention: mha, ffn: {activation: relu, mult: 2}}]}\n"
)
CENTERED = {"type": "mdha", "kernel": 3, "centered": True}  # an encoder layer's convolution
TEXT = "\n".join("the king and queen of a castle went to see what every lord would say" for _ in range(200))


def space(path: str = "", value: Any = None, *, drop: str = "") -> str:
    """The valid space as YAML, with the dotted ``path`` set to ``value`` (or the key ``drop`` removed)."""
    doc = copy.deepcopy(SPACE)
    for dotted, new in ((path, value), (drop, None)):
        if not dotted:
            continue
        *parents, last = dotted.split(".")
        node = doc
        for key in parents:
            node = node[key]
        if dotted == drop:
            del node[last]
        else:
            node[last] = new
    return yaml.safe_dump(doc, sort_keys=False)


def foreign_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")


def optuna_lookalike(path: Path) -> None:
    """Someone else's database that happens to have tables named ``studies`` and ``trials``.

    In WAL mode, so a reader that opened it would leave ``-wal`` and ``-shm`` files beside it.
    """
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE studies (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("CREATE TABLE trials (id INTEGER PRIMARY KEY, study INTEGER, score REAL)")
        db.execute("INSERT INTO studies VALUES (1, 'mine')")
        db.commit()


def damaged_study(path: Path) -> None:
    """A real Optuna study database in WAL mode, cut to half its size (a disk filled up, a bad copy)."""
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    study = optuna.create_study(study_name="s", storage=storage)
    for i in range(30):
        study.add_trial(
            optuna.trial.create_trial(
                value=float(i),
                params={"x": float(i)},
                distributions={"x": FloatDistribution(0, 100)},
                user_attrs={"note": "x" * 200},
            )
        )
    with storage.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    storage.engine.dispose()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


#: the five commands that open a study, on the SQLite file DB (``{db}`` in the URL)
STUDY_COMMANDS: dict[str, list[str]] = {
    "best": ["best", "--study", "s", "--storage", "sqlite:///DB"],
    "show": ["show", "--study", "s", "--storage", "sqlite:///DB", "--trial", "0"],
    "plot": ["plot", "--study", "s", "--storage", "sqlite:///DB", "--out", "plots"],
    "export": ["export", "--study", "s", "--storage", "sqlite:///DB", "--best", "--out", "x.yaml"],
}

#: what each case's directory holds: the valid space, a corpus, and a few decoys
BASE_FILES: dict[str, Any] = {
    "space.yaml": space(),
    "corpus/a.txt": TEXT,
    "corpus/b.txt": TEXT.upper(),
    "notes.txt": "not a database\n",
    "arch.yaml": ARCH,
    "emptydir/": None,
}


def search(*extra: str) -> list[str]:
    return ["search", "--space", "space.yaml", "--data", "corpus", "--runs-dir", "runs", "--local",
            "--evaluator", "proxy:params", "--trials", "2", *extra]  # fmt: skip


def cases() -> list[Any]:
    c: list[Any] = []

    def case(
        id: str, argv: list[str], expect: str | tuple[str, ...], files: dict[str, Any] | None = None
    ) -> None:
        c.append(pytest.param(argv, (expect,) if isinstance(expect, str) else expect, files or {}, id=id))

    # -- search: flags --------------------------------------------------------------------------
    case("trials-zero", search("--trials", "0"), "--trials")
    case("trials-negative", search("--trials", "-3"), "--trials")
    case("trials-not-a-number", search("--trials", "many"), "--trials")
    case("steps-zero", search("--steps", "0"), "--steps")
    case("seconds-negative", search("--seconds", "-1"), "--seconds")
    case("budget-flops-nan", search("--budget-flops", "nan"), "--budget-flops")
    case("two-budgets", search("--steps", "5", "--seconds", "3"), ("--seconds", "--steps"))
    case("workers-zero", search("--workers", "0"), "--workers")
    case("cpus-per-trial-zero", search("--cpus-per-trial", "0"), "--cpus-per-trial")
    case("gpus-negative", search("--gpus-per-trial", "-1"), "--gpus-per-trial")
    case("gpus-on-cpu", search("--gpus-per-trial", "1", "--device", "cpu"), ("--gpus-per-trial", "--device"))
    case("device-unknown", search("--device", "tpu"), "--device")
    case("hurdles-out-of-range", search("--hurdles", "0.5,1.5"), "--hurdles")
    case("hurdles-not-numbers", search("--hurdles", "half"), "--hurdles")
    case(
        "hurdle-percentile-over-100",
        search("--hurdles", "0.5", "--hurdle-percentile", "150"),
        "--hurdle-percentile",
    )
    case("max-flops-zero", search("--max-flops", "0"), "--max-flops")
    case("max-flops-negative", search("--max-flops", "-2e12"), "--max-flops")
    case("max-flops-nan", search("--max-flops", "nan"), "--max-flops")
    case("max-flops-not-a-number", search("--max-flops", "lots"), "--max-flops")
    case(
        "max-flops-under-one-budget",
        search("--budget-flops", "1e9", "--max-flops", "1e8", "--evaluator", "lm"),
        ("--max-flops", "budget"),
    )
    # a proxy trains nothing: a FLOPs limit never ended the search (it ran until 100 repeats in a row)
    case("proxy-with-max-flops", search("--max-flops", "1e12"), ("--max-flops", "trains nothing"))
    case(
        "hurdle-min-trials-zero",
        search("--hurdles", "0.5", "--hurdle-min-trials", "0"),
        "--hurdle-min-trials",
    )
    case("sampler-unknown", search("--sampler", "genetic"), "--sampler")
    case("objective-unknown", search("--objective", "speed"), "--objective")
    case("evaluator-unknown", search("--evaluator", "proxy:vibes"), "--evaluator")
    case(  # it was blamed on --prescreen, which was not given, and the file was not named
        "yaml-prescreen-unknown-task",
        search(),
        ("space.yaml: search.prescreen:", "unknown probe task 'nope'"),
        {"space.yaml": space("search", {"prescreen": "probes:nope@5"})},
    )
    case("evaluator-sleep-forever", search("--evaluator", "sleep:inf"), ("--evaluator", "finite"))
    case("retries-negative", search("--retries", "-1"), "--retries")
    case("seed-negative", search("--seed", "-1"), "--seed")
    case("population-zero", search("--population", "0"), "--population")
    case("worker-timeout-zero", search("--worker-timeout", "0"), "--worker-timeout")
    case("unknown-flag", search("--trails", "5"), "--trails")
    case("local-with-address", search("--address", "auto"), ("--local", "--address"))
    case("local-with-workers", search("--workers", "3"), ("--local", "--workers"))
    # one rule: a field given that has no effect in the chosen mode is refused, naming both
    case("local-with-retries", search("--retries", "5"), ("--local", "--retries"))
    case("local-with-worker-timeout", search("--worker-timeout", "60"), ("--local", "--worker-timeout"))
    case("local-with-gpus", search("--gpus-per-trial", "1"), ("--local", "--gpus-per-trial"))
    case(
        "population-with-random",
        search("--sampler", "random", "--population", "8"),
        ("--population", "random"),
    )
    case(
        "hurdle-percentile-without-hurdles",
        search("--hurdle-percentile", "30"),
        ("--hurdle-percentile", "hurdles"),
    )
    if not torch.cuda.is_available():  # a request this machine cannot meet: refused before anything exists
        ray = [a for a in search() if a != "--local"]
        case("device-cuda-without-cuda", search("--device", "cuda"), ("--device", "CUDA is not available"))
        case(
            "device-cuda-without-cuda-on-ray",
            ray + ["--device", "cuda"],
            ("--device", "CUDA is not available"),
        )
        case(
            "gpus-without-cuda",
            ray + ["--gpus-per-trial", "1"],
            ("--gpus-per-trial", "CUDA is not available"),
        )
        for extra in (["--local"], ["--gpus-per-trial", "1"]):
            case(
                f"confirm-cuda-without-cuda{extra[0]}",
                ["confirm", "--study", "s", "--storage", "{url}", "--device", "cuda", *extra],
                ("--device", "CUDA is not available"),
            )
    case("study-name-with-slash", search("--study", "a/b"), "--study")
    # -- search: storage and directories --------------------------------------------------------
    case("storage-not-a-url", search("--storage", "runs.db"), "--storage")
    case("storage-unknown-database", search("--storage", "nosuchdb://host/db"), "--storage")
    case("storage-is-a-text-file", search("--storage", "sqlite:///notes.txt"), ("--storage", "notes.txt"))
    case(
        "storage-is-someone-elses-sqlite",
        search("--storage", "sqlite:///mine.db"),
        ("--storage", "mine.db"),
        {"mine.db": foreign_sqlite},
    )
    case("storage-is-a-directory", search("--storage", "sqlite:///emptydir"), ("--storage", "emptydir"))
    case("storage-percent-escape", search("--storage", "sqlite:///x%41.db"), ("--storage", "%41", "xA.db"))
    case("storage-in-memory", search("--storage", "sqlite://"), ("--storage", "in memory"))
    case("storage-memory-file", search("--storage", "sqlite:///:memory:"), ("--storage", "in memory"))
    case(
        "storage-shared-memory",
        search("--storage", "sqlite:///file::memory:?cache=shared"),
        ("--storage", "in memory"),
    )
    # Someone else's SQLite file with tables named like Optuna's, and a damaged study: refused by
    # every command, byte for byte unchanged, no -wal/-shm left beside it (the directory snapshot).
    for name, argv in {"search": search("--storage", "sqlite:///DB"), **STUDY_COMMANDS}.items():
        case(
            f"{name}-on-a-lookalike-database",
            [a.replace("DB", "app.db") for a in argv],
            ("app.db", "not an Optuna study database"),
            {"app.db": optuna_lookalike},
        )
        case(
            f"{name}-on-a-damaged-study",
            [a.replace("DB", "study.db") for a in argv],
            ("study.db", "damaged"),
            {"study.db": damaged_study},
        )
    case("runs-dir-is-a-file", search("--runs-dir", "notes.txt"), ("--runs-dir", "notes.txt"))
    case("runs-dir-under-a-file", search("--runs-dir", "notes.txt/runs"), ("--runs-dir", "notes.txt"))
    # -- search: corpus -------------------------------------------------------------------------
    case("data-missing", search("--data", "nowhere"), "nowhere")
    case("data-empty-file", search("--data", "empty.txt"), "empty.txt", {"empty.txt": ""})
    case("data-empty-directory", search("--data", "emptydir"), "emptydir")
    case(
        "data-two-kinds-of-corpus",
        search("--data", "mixed"),
        ("mixed", "two kinds of corpus"),
        {"mixed/train.bin": b"\x00" * 8, "mixed/train.src": "a b\n", "mixed/train.tgt": "b a\n"},
    )
    case(
        "data-binary-only", search("--data", "bin"), ("bin", "no text files"), {"bin/x.dat": b"\x00\xff" * 64}
    )
    # one distinct token: every model would score a "perfect" val_loss 0, which a search ranks first
    case(
        "data-one-token-search",
        search("--data", "a.txt", "--evaluator", "lm"),
        ("a.txt", "same id"),
        {"a.txt": "a" * 5000},
    )
    case(
        "data-one-token-train",
        ["train", "--arch", "arch.yaml", "--data", "a.txt", "--steps", "1"],
        ("a.txt", "same id"),
        {"a.txt": "a" * 5000},
    )
    # a path in a file is relative to the file (nas.files.paths); one written for the working directory, which
    # the file's directory does not have, was read from the working directory: refused, naming both
    spec_in_configs = ["search", "--space", "configs/s.yaml", "--runs-dir", "runs", "--local", "--evaluator",
                       "proxy:params", "--trials", "2"]  # fmt: skip
    case(
        "spec-corpus-relative-to-the-working-directory",
        spec_in_configs,
        ("configs/s.yaml: data.corpus:", "configs/corpus is not there", "write ../corpus"),
        {"configs/s.yaml": space("data", {"corpus": "corpus"})},
    )
    case(
        "spec-data-string-relative-to-the-working-directory",
        spec_in_configs,
        ("configs/s.yaml: data:", "write ../corpus/a.txt"),
        {"configs/s.yaml": space("data", "corpus/a.txt")},
    )
    case(
        "spec-tokenizer-relative-to-the-working-directory",
        spec_in_configs,
        ("configs/s.yaml: data.tokenizer:", "write ../notes.txt"),
        {"configs/s.yaml": space("data", {"corpus": "../corpus", "tokenizer": "notes.txt"})},
    )
    case(
        "train-arch-data-relative-to-the-working-directory",
        ["train", "--arch", "archs/a.yaml", "--steps", "1"],
        ("archs/a.yaml: data:", "write ../corpus"),
        {"archs/a.yaml": ARCH + "data: corpus\n"},
    )
    case(
        "train-arch-record-relative-to-the-working-directory",
        ["train", "--arch", "archs/a.yaml", "--steps", "1"],
        ("archs/a.yaml: data.corpus:", "write ../corpus"),
        {"archs/a.yaml": ARCH + "data: {corpus: corpus, vocab_size: 256, fingerprint: 'sha256:0'}\n"},
    )
    case(
        "train-arch-record-tokenizer-relative-to-the-working-directory",
        ["train", "--arch", "archs/a.yaml", "--steps", "1"],
        ("archs/a.yaml: data.tokenizer:", "write ../notes.txt"),
        {"archs/a.yaml": ARCH + "data: {corpus: ../corpus, tokenizer: notes.txt, vocab_size: 300}\n"},
    )
    # -- search: the space file -----------------------------------------------------------------
    case("space-missing", search("--space", "nope.yaml"), "nope.yaml")
    case("space-is-a-directory", search("--space", "corpus"), "corpus")
    case(
        "yaml-syntax-error",
        search(),
        ("space.yaml", "line 2"),
        {"space.yaml": "globals: {d_model: [16, 32\n"},
    )
    case("yaml-tab-indent", search(), ("space.yaml", "line 2"), {"space.yaml": "globals:\n\td_model: 16\n"})
    case(
        "yaml-python-object",
        search(),
        ("space.yaml", "!!python/object/apply:os.system"),
        {"space.yaml": "!!python/object/apply:os.system ['touch pwned']\n"},
    )
    case(
        "yaml-python-name",
        search(),
        ("space.yaml", "!!python/name:os.system"),
        {"space.yaml": "globals: !!python/name:os.system\n"},
    )
    case("yaml-not-utf8", search(), "space.yaml", {"space.yaml": b"\x80 name: x\n"})
    case(
        "yaml-utf16",
        search(),
        ("space.yaml", "UTF-16 text", "save it as UTF-8"),
        {"space.yaml": space().encode("utf-16")},
    )
    case("yaml-empty", search(), "space.yaml", {"space.yaml": ""})
    case("yaml-a-list", search(), "space.yaml", {"space.yaml": "- mha\n- mdha\n"})
    case(
        "yaml-unknown-top-key",
        search(),
        ("space.yaml", "trainng"),
        {"space.yaml": space("trainng", {"lr": 1})},
    )
    case("yaml-missing-layers", search(), ("space.yaml", "layers"), {"space.yaml": space(drop="layers")})
    case(
        "yaml-unknown-block",
        search(),
        ("space.yaml", "flash"),
        {"space.yaml": space("layers.attention", ["mha", "flash"])},
    )
    case(
        "yaml-unknown-block-option",
        search(),
        ("space.yaml", "kernal"),
        {"space.yaml": space("layers.attention", {"mdha": {"kernal": 3}})},
    )
    case(  # the mixture's component sits in a causal layer: its taps would read the next tokens
        "yaml-centered-conv-in-a-causal-mixture",
        search(),
        ("space.yaml", "centered"),
        {"space.yaml": space("layers.attention", {"mixture": {"components": [["mha", CENTERED]]}})},
    )
    case(
        "yaml-wrong-type",
        search(),
        ("space.yaml", "globals.d_model"),
        {"space.yaml": space("globals.d_model", "big")},
    )
    case(
        "yaml-heads-do-not-divide",
        search(),
        ("space.yaml", "n_heads"),
        {"space.yaml": space("globals.d_model", 30).replace("n_heads: 2", "n_heads: 4")},
    )
    case(  # a seed named that no candidate can be was never queued, without a word
        "yaml-seed-arch-the-space-cannot-hold",
        search(),
        ("space.yaml", "seed_archs: transformer_pp", "is no candidate of this space"),
        {"space.yaml": space("seed_archs", ["vanilla", "transformer_pp"])},
    )
    case(  # every candidate takes the corpus's vocabulary: the value was dropped without a word
        "yaml-vocab-size-in-globals",
        search(),
        ("space.yaml", "globals.vocab_size", "the corpus's"),
        {"space.yaml": space("globals.vocab_size", 1000)},
    )
    case(  # a gene that changes no candidate, refused as it is in an architecture file
        "yaml-rope-base-without-rope",
        search(),
        ("space.yaml", "globals.rope_base", "pos_encoding offers learned"),
        {"space.yaml": space("globals.rope_base", [100, 10000])},
    )
    case(
        "yaml-range-inverted",
        search(),
        ("space.yaml", "globals.n_layers"),
        {"space.yaml": space("globals.n_layers", {"low": 4, "high": 1})},
    )
    case(
        "yaml-empty-choice",
        search(),
        ("space.yaml", "globals.n_layers"),
        {"space.yaml": space("globals.n_layers", [])},
    )
    case(
        "yaml-unknown-activation",
        search(),
        ("space.yaml", "layers.ffn.activation"),
        {"space.yaml": space("layers.ffn.activation", ["relu", "swish"])},
    )
    case(
        "yaml-budget-zero",
        search(),
        ("space.yaml", "budget.steps"),
        {"space.yaml": space("budget", {"steps": 0})},
    )
    case(
        "yaml-two-budgets",
        search(),
        ("space.yaml", "budget"),
        {"space.yaml": space("budget", {"steps": 5, "seconds": 3})},
    )
    case(
        "yaml-recipe-unknown-key",
        search(),
        ("space.yaml", "recipe.lrate"),
        {"space.yaml": space("recipe", {"lrate": 0.1})},
    )
    case(
        "yaml-recipe-negative-lr",
        search(),
        ("space.yaml", "recipe.lr"),
        {"space.yaml": space("recipe", {"lr": -1})},
    )
    case(
        "yaml-cap-no-candidate-meets",
        search(),
        ("space.yaml", "constraints", "no candidate"),
        {"space.yaml": space("constraints", {"max_params": 10})},
    )
    case(
        "yaml-negative-cap",
        search(),
        ("space.yaml", "constraints.max_params"),
        {"space.yaml": space("constraints", {"max_params": -5})},
    )
    case(
        "yaml-unknown-seed-arch",
        search(),
        ("space.yaml", "seed_archs"),
        {"space.yaml": space("seed_archs", ["gpt2"])},
    )
    # -- search: an existing study under other settings (the shared study, see ``study``) -------
    case(
        "study-reused-with-another-space",
        search("--study", "s", "--storage", "{url}"),
        ("--study 's'", "space.constraints"),
    )
    case(
        "study-reused-with-another-objective",
        search("--space", "{space}", "--study", "s", "--storage", "{url}", "--objective", "loss"),
        "--objective",
    )
    case(
        "study-reused-with-another-budget",
        search("--space", "{space}", "--study", "s", "--storage", "{url}", "--steps", "9"),
        ("--study", "budget"),
    )
    # -- train ----------------------------------------------------------------------------------
    case("train-arch-missing", ["train", "--arch", "nope.yaml"], "nope.yaml")
    case("train-arch-flag-missing", ["train", "--steps", "3"], "--arch")
    case(
        "train-arch-invalid",
        ["train", "--arch", "bad.yaml"],
        ("bad.yaml", "n_heads"),
        {"bad.yaml": ARCH.replace("d_model: 16, n_heads: 2", "d_model: 30, n_heads: 4")},
    )
    case(
        "train-arch-centered-conv-in-a-causal-mixture",
        ["train", "--arch", "bad.yaml"],
        ("bad.yaml", "components.1.centered"),
        {
            "bad.yaml": ARCH.replace(
                "attention: mha",
                "attention: {type: mixture, components: [mha, {type: mdha, centered: true}]}",
            )
        },
    )
    case(  # the mixture's one causal mask would ignore the window: the component would be mha
        "train-arch-sliding-window-in-a-mixture",
        ["train", "--arch", "bad.yaml"],
        ("bad.yaml", "components.0.type", "window would not apply", "mix mha instead"),
        {
            "bad.yaml": ARCH.replace(
                "attention: mha",
                "attention: {type: mixture, components: [{type: sliding_window, window: 4}, synth_random]}",
            )
        },
    )
    case(
        "yaml-sliding-window-in-a-mixture",
        search(),
        ("space.yaml", "sliding_window", "cannot be mixed"),
        {"space.yaml": space("layers.attention", {"mixture": {"components": [["sliding_window", "mha"]]}})},
    )
    case(
        "train-arch-unknown-section",
        ["train", "--arch", "bad.yaml"],
        ("bad.yaml", "training"),
        {"bad.yaml": ARCH + "training: {lr: 0.1}\n"},
    )
    case(
        "train-arch-python-object",
        ["train", "--arch", "bad.yaml"],
        ("bad.yaml", "!!python/object"),
        {"bad.yaml": "arch: !!python/object:collections.OrderedDict {}\n"},
    )
    case(
        "train-arch-budget-in-file",
        ["train", "--arch", "bad.yaml"],
        ("bad.yaml", "budget.steps"),
        {"bad.yaml": ARCH + "budget: {steps: -1}\n"},
    )
    case(
        "train-arch-is-a-space",
        ["train", "--arch", "space.yaml"],
        ("space.yaml", "is a search space", "--space"),
    )
    # an architecture file's data section is held to a spec's rules (nas.spec.sections.DataSpec)
    case(  # the typo was dropped and the text trained as bytes
        "train-arch-data-unknown-key",
        ["train", "--arch", "bad.yaml", "--steps", "1"],
        ("bad.yaml: data.tokenizr: unknown key", "tokenizer"),
        {"bad.yaml": ARCH + "data: {corpus: corpus, tokenizr: notes.txt}\n"},
    )
    case(  # it trained on the file's own directory
        "train-arch-data-empty-corpus",
        ["train", "--arch", "bad.yaml", "--steps", "1"],
        ("bad.yaml: data.corpus: must be a non-empty string",),
        {"bad.yaml": ARCH + "data: {corpus: '', vocab_size: 256}\n"},
    )
    case(  # a traceback
        "train-arch-data-tokenizer-not-a-string",
        ["train", "--arch", "bad.yaml", "--steps", "1"],
        ("bad.yaml: data.tokenizer: must be a non-empty string",),
        {"bad.yaml": ARCH + "data: {corpus: corpus, tokenizer: [a], vocab_size: 300}\n"},
    )
    case("search-space-is-an-arch", search("--space", "arch.yaml"), ("arch.yaml", "architecture"))
    case("train-steps-zero", ["train", "--arch", "arch.yaml", "--steps", "0"], "--steps")
    case(
        "train-data-missing", ["train", "--arch", "arch.yaml", "--data", "nowhere", "--steps", "1"], "nowhere"
    )
    # -- files another tool hands over: encodings, shapes, a directory for a file (the sixth round) ------
    tokens = {"tok/train.bin": b"\x01\x00" * 200, "tok/val.bin": b"\x02\x00" * 100,
              "tok/meta.json": '{"vocab_size": 300, "dtype": "uint16"}'}  # fmt: skip
    on_tokens = ["train", "--arch", "arch.yaml", "--data", "tok", "--steps", "1"]
    case(  # it was "not readable JSON ('utf-8' codec can't decode byte 0xff in position 0...)"
        "tokens-meta-utf16",
        on_tokens,
        ("tok/meta.json: UTF-16 text", "save it as UTF-8", '{"vocab_size": 50257, "dtype": "uint16"}'),
        {**tokens, "tok/meta.json": '{"vocab_size": 300, "dtype": "uint16"}'.encode("utf-16")},
    )
    case(  # a RecursionError traceback
        "tokens-meta-nested-deep",
        on_tokens,
        ("tok/meta.json: nested too deeply",),
        {**tokens, "tok/meta.json": "[" * 100_000 + "]" * 100_000},
    )
    case(  # skipped without a word: bits per byte then came from meta.json's average
        "tokens-val-bytes-a-directory",
        on_tokens,
        ("tok/val_bytes.bin: is a directory, not a file",),
        {**tokens, "tok/val_bytes.bin/": None},
    )
    on_text = ["train", "--arch", "arch.yaml", "--data", "corpus", "--tokenizer", "tok.json", "--steps", "1"]
    case(
        "tokenizer-utf16",
        on_text,
        ("--tokenizer tok.json: UTF-16 text", "a Hugging Face tokenizers file"),
        {"tok.json": '{"version": "1.0"}'.encode("utf-16")},
    )
    case("tokenizer-empty", on_text, ("--tokenizer tok.json: is empty", "Tokenizer.save"), {"tok.json": ""})
    case(
        "tokenizer-a-directory",
        on_text,
        ("--tokenizer tok.json: is a directory, not a file",),
        {"tok.json/": None},
    )
    case(  # "'utf-8' codec can't decode byte 0xff in position 21: invalid start byte"
        "arch-not-utf8",
        ["train", "--arch", "bad.yaml", "--steps", "1"],
        (
            "bad.yaml: cannot read architecture file: not UTF-8 text (byte 0xff at line 2, column 1)",
            "UTF-8 YAML",
        ),
        {"bad.yaml": b"arch: {d_model: 16}\n\xff\n"},
    )
    case(
        "export-checkpoint-binary",
        ["export", "--checkpoint", "m.pt", "--hf", "out"],
        ("m.pt: not a readable checkpoint", "a file `train --save` wrote"),
        {"m.pt": bytes(range(256)) * 4},
    )
    case(  # a study file this user may not read (EACCES; root reads anything, so an EIO file stands in): a traceback
        "best-storage-unreadable",
        ["best", "--study", "s", "--storage", "sqlite:////proc/self/mem"],
        ("--storage", "cannot read /proc/self/mem (Input/output error)"),
    )
    case(  # "no such database file emptydir"
        "best-storage-a-directory",
        ["best", "--study", "s", "--storage", "sqlite:///emptydir"],
        ("--storage", "emptydir is a directory"),
    )
    # -- best / show / export -------------------------------------------------------------------
    case("best-study-flag-missing", ["best"], "--study")
    case("best-top-zero", ["best", "--study", "s", "--storage", "{url}", "--top", "0"], "--top")
    case("best-no-such-study", ["best", "--study", "nosuch", "--storage", "{url}"], "--study 'nosuch'")
    case("best-no-runs-dir", ["best", "--study", "s", "--runs-dir", "runs"], "--study 's'")
    case("show-no-such-trial", ["show", "--study", "s", "--storage", "{url}", "--trial", "99"], "--trial 99")
    case(
        "export-failed-trial",
        ["export", "--study", "s", "--storage", "{url}", "--trial", "{failed}", "--out", "x.yaml"],
        ("--trial", "INFEASIBLE"),
    )
    case(
        "export-out-exists",
        ["export", "--study", "s", "--storage", "{url}", "--best", "--out", "notes.txt"],
        ("--out", "notes.txt"),
    )
    case(
        "export-out-is-a-directory",
        ["export", "--study", "s", "--storage", "{url}", "--best", "--out", "emptydir"],
        ("--out", "emptydir"),
    )
    case("unknown-command", ["frobnicate"], "frobnicate")
    contract_cases(case)
    return c


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [*{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}]\n"
    for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)  # "billion laughs": nine lines, 9**9 strings once expanded
NAN, INF = float("nan"), float("inf")
RECIPE = SPACE["recipe"]


def arch_with(extra: str = "", **arch: Any) -> str:
    """The valid architecture file with ``arch`` keys replaced and ``extra`` sections appended."""
    doc = yaml.safe_load(ARCH)
    doc["arch"].update(arch)
    return yaml.safe_dump(doc) + extra


def contract_cases(case: Any) -> None:
    """One case per class of docs/reliability.md's input contract (issue 16); the fuzz tests vary them."""
    lm = search("--evaluator", "lm")  # the trainer's checks apply to searches that train
    train = ["train", "--arch", "arch.yaml", "--steps", "1"]
    # -- non-finite and out-of-range numbers, wherever they are -------------------------------
    case(
        "yaml-nan-size",
        search(),
        ("space.yaml", "globals.d_model", "non-finite"),
        {"space.yaml": space("globals.d_model", NAN)},
    )
    case(
        "yaml-inf-in-a-range",
        search(),
        ("space.yaml", "globals.n_layers.high", "non-finite"),
        {"space.yaml": space("globals.n_layers", {"low": 1, "high": INF})},
    )
    case(
        "yaml-nan-block-option",
        search(),
        ("space.yaml", "layers.attention.mdha.kernel"),
        {"space.yaml": space("layers.attention", {"mdha": {"kernel": [2, NAN]}})},
    )
    case(
        "yaml-inf-lr",
        search(),
        ("space.yaml", "recipe.lr"),
        {"space.yaml": space("recipe", {**RECIPE, "lr": INF})},
    )
    case(
        "yaml-overflowing-float",
        search(),
        ("space.yaml", "recipe.lr", "non-finite"),
        {"space.yaml": space().replace("  batch_size: 4", "  batch_size: 4\n  lr: 1.0e+999")},
    )
    case(
        "yaml-nan-cap",
        search(),
        ("space.yaml", "constraints.max_params"),
        {"space.yaml": space("constraints", {"max_params": NAN})},
    )
    case(
        "yaml-seed-2-32",
        search(),
        ("space.yaml", "recipe.seed", "4294967295"),
        {"space.yaml": space("recipe", {**RECIPE, "seed": 2**32})},
    )
    case(
        "yaml-beta-one",
        search(),
        ("space.yaml", "recipe.beta2", "[0, 1)"),
        {"space.yaml": space("recipe", {**RECIPE, "beta2": 1.0})},
    )
    case(
        "yaml-beta-negative",
        search(),
        ("space.yaml", "recipe.beta1"),
        {"space.yaml": space("recipe", {**RECIPE, "beta1": -0.5})},
    )
    case(
        "yaml-lr-1e308",
        search(),
        ("space.yaml", "recipe.lr"),
        {"space.yaml": space("recipe", {**RECIPE, "lr": 1e308})},
    )
    case(
        "yaml-min-lr-ratio-over-1",
        search(),
        ("space.yaml", "recipe.min_lr_ratio"),
        {"space.yaml": space("recipe", {**RECIPE, "min_lr_ratio": 5})},
    )
    case(
        "yaml-weight-decay-over-fp32",
        search(),
        ("space.yaml", "recipe.weight_decay"),
        {"space.yaml": space("recipe", {**RECIPE, "weight_decay": 1e39})},
    )
    case(
        "yaml-budget-inf",
        search(),
        ("space.yaml", "budget.steps"),
        {"space.yaml": space("budget", {"steps": INF})},
    )
    case(
        "arch-nan-mult",
        train,
        ("arch.yaml", "non-finite"),
        {"arch.yaml": ARCH.replace("mult: 2", "mult: .nan")},
    )
    case(
        "arch-seed-2-32",
        train,
        ("arch.yaml", "recipe.seed"),
        {"arch.yaml": ARCH + "recipe: {seed: 4294967296}\n"},
    )
    case(
        "arch-inf-budget",
        ["train", "--arch", "arch.yaml"],
        ("arch.yaml", "budget.tokens"),
        {"arch.yaml": ARCH + "budget: {tokens: .inf}\n"},
    )
    case(
        "arch-recorded-threads-1e14",
        ["train", "--arch", "arch.yaml", "--steps", "1"],
        ("arch.yaml", "metrics.threads"),
        {"arch.yaml": ARCH + "metrics: {device: cpu, threads: 100000000000000}\n"},
    )
    for name, value in (("negative", "-5"), ("fractional", "3.5"), ("zero", "0")):  # were ignored silently
        case(
            f"arch-recorded-threads-{name}",
            ["train", "--arch", "arch.yaml", "--steps", "1"],
            ("arch.yaml", "metrics.threads"),
            {"arch.yaml": ARCH + f"metrics: {{device: cpu, threads: {value}}}\n"},
        )
    case("train-threads-1e14", [*train, "--threads", "100000000000000"], "--threads")
    case("train-seed-2-32", [*train, "--seed", "4294967296"], "--seed")
    case("search-seed-2-32", search("--seed", "4294967296"), "--seed")
    case("cpus-per-trial-1e14", search("--cpus-per-trial", "1e14"), "--cpus-per-trial")
    case("worker-timeout-nan", search("--worker-timeout", "nan"), "--worker-timeout")
    case(
        "trial-timeout-1e300",
        [a for a in search("--trial-timeout", "1e300") if a != "--local"],
        "--trial-timeout",
    )
    # -- YAML that expands without bound ------------------------------------------------------
    case("yaml-billion-laughs", search(), ("space.yaml", "aliases are expanded"), {"space.yaml": BOMB})
    case(
        "yaml-nested-500",
        search(),
        ("space.yaml", "nested"),
        {"space.yaml": "globals: " + "[" * 500 + "]" * 500},
    )
    case(
        "yaml-nested-100000",
        search(),
        ("space.yaml", "nested"),
        {"space.yaml": "globals: " + "[" * 100000 + "]" * 100000},
    )
    case(
        "yaml-alias-inside-itself", search(), ("space.yaml", "alias"), {"space.yaml": "globals: &g [1, *g]\n"}
    )
    case(
        "yaml-3-mb",
        search(),
        ("space.yaml", "bytes"),
        {"space.yaml": "# " + "x" * 3_000_000 + "\n" + space()},
    )
    case(
        "arch-3-mb",
        train,
        ("arch.yaml: an architecture file of", "bytes"),
        {"arch.yaml": "# " + "x" * 3_000_000 + "\n"},
    )
    case("arch-billion-laughs", train, ("arch.yaml", "aliases are expanded"), {"arch.yaml": BOMB})
    # -- sizes that cannot fit, refused from an estimate ----------------------------------------
    case(
        "yaml-n-layers-1e8",
        search(),
        ("space.yaml", "globals.n_layers", "4096"),
        {"space.yaml": space("globals.n_layers", 100000000)},
    )
    case(
        "yaml-d-model-1e10",
        search(),
        ("space.yaml", "globals.d_model"),
        {"space.yaml": space("globals", {**SPACE["globals"], "d_model": 10**10})},
    )
    case(
        "yaml-d-model-over-one-device",
        search(),
        ("space.yaml", "globals.d_model", "GiB"),
        {"space.yaml": space("globals", {**SPACE["globals"], "d_model": 2**18})},
    )
    case(
        "yaml-max-len-over-one-device",
        search(),
        ("space.yaml", "globals.max_len", "GiB"),
        {"space.yaml": space("globals", {**SPACE["globals"], "max_len": 2**21})},
    )
    case(
        "arch-repeat-1e8",
        train,
        ("arch.yaml", "layers.repeat"),
        {
            "arch.yaml": "arch: {d_model: 16, n_heads: 2, max_len: 16, layers: {repeat: 100000000, attention: mha}}\n"
        },
    )
    case("arch-d-model-1e10", train, ("arch.yaml", "arch.d_model"), {"arch.yaml": arch_with(d_model=10**10)})
    case(
        "arch-max-len-over-this-machine",
        train,
        ("arch.yaml", "arch.max_len", "GiB"),
        {"arch.yaml": arch_with(max_len=10**7)},
    )
    case(
        "arch-batch-over-this-machine",
        train,
        ("arch.yaml", "recipe.batch_size", "GiB"),
        {"arch.yaml": ARCH + "recipe: {batch_size: 1000000000}\n"},
    )
    # -- what every trial of a search would refuse ---------------------------------------------
    case(
        "search-corpus-shorter-than-a-window",
        [*lm, "--data", "short.txt"],
        ("short.txt", "window"),
        {"short.txt": "too short\n"},
    )
    case(
        "search-seq-len-over-max-len",
        lm,
        ("space.yaml", "recipe.seq_len"),
        {"space.yaml": space("recipe", {**RECIPE, "seq_len": 32})},
    )
    case(
        # the flag gave the value: the line names the flag, not the space file (issue 36)
        "search-tokens-below-one-step",
        [*lm, "--tokens", "10"],
        ("error: --budget.tokens (--tokens)", "one training step"),
    )
    case(
        "search-flops-below-one-step",
        [*lm, "--budget-flops", "1000"],
        ("error: --budget.flops (--budget-flops)",),
    )
    # -- output paths, checked before any work -------------------------------------------------
    case("train-save-a-directory", [*train, "--save", "emptydir"], ("--save", "emptydir"))
    case("train-save-under-a-file", [*train, "--save", "notes.txt/model.pt"], ("--save", "notes.txt"))
    case(
        "train-save-read-only",
        [*train, "--save", "/proc/nas-lm/model.pt"],
        ("--save", "/proc/nas-lm/model.pt"),
    )
    case("train-logdir-a-file", [*train, "--logdir", "notes.txt"], ("--logdir", "notes.txt"))
    case(
        "export-out-under-a-file",
        ["export", "--study", "s", "--storage", "{url}", "--best", "--out", "notes.txt/x.yaml"],
        ("--out", "notes.txt"),
    )
    case(
        "export-out-read-only",
        ["export", "--study", "s", "--storage", "{url}", "--best", "--out", "/proc/x.yaml"],
        ("--out", "/proc/x.yaml"),
    )
    case(
        "plot-out-a-file",
        ["plot", "--study", "s", "--storage", "{url}", "--out", "notes.txt"],
        ("--out", "notes.txt"),
    )
    case("storage-under-a-file", search("--storage", "sqlite:///notes.txt/s.db"), ("--storage", "notes.txt"))
    case("storage-read-only", search("--storage", "sqlite:////proc/nas-lm/s.db"), ("--storage", "/proc"))
    case("runs-dir-read-only", search("--runs-dir", "/proc/nas-lm"), ("--runs-dir", "/proc"))
    # -- study names ---------------------------------------------------------------------------
    case("study-name-empty", search("--study", ""), "--study")
    case("study-name-newline", search("--study", "a\nb"), "--study")
    case("study-name-space", search("--study", "my study"), "--study")
    case("study-name-too-long", search("--study", "x" * 300), "--study")
    case(
        "study-name-from-the-space-file",
        [a for a in search() if a != "--study"],
        ("space.yaml", "name"),
        {"space.yaml": space("name", "two\nlines")},
    )


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A finished study (proxy scores, some trials over the parameter cap) the cases must not change."""
    root = tmp_path_factory.mktemp("study")
    doc = copy.deepcopy(SPACE)
    doc["constraints"] = {"max_params": 10000}
    (root / "space.yaml").write_text(yaml.safe_dump(doc))
    (root / "corpus").mkdir()
    (root / "corpus" / "a.txt").write_text(TEXT)
    url = f"sqlite:///{root / 's.db'}"
    argv = ["search", "--space", str(root / "space.yaml"), "--data", str(root / "corpus"), "--study", "s",
            "--storage", url, "--local", "--evaluator", "proxy:params", "--trials", "6", "--sampler", "random",
            "--no-tensorboard"]  # fmt: skip
    assert main(argv) == 0
    trials = optuna.load_study(study_name="s", storage=url).trials
    # Over the cap: never trained, recorded as infeasible (not exportable).
    failed = [t.number for t in trials if t.user_attrs.get("infeasible")]
    assert failed and any(t.state == TrialState.COMPLETE and t.number not in failed for t in trials)
    # The search's SQLAlchemy engines sit in reference cycles; the last connection to close
    # checkpoints the WAL into the database file.  Close them now, not during some case.
    gc.collect()
    return {"url": url, "db": root / "s.db", "space": str(root / "space.yaml"), "failed": str(failed[0])}


def snapshot(root: Path) -> dict[str, Any]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_files(root: Path, files: dict[str, Any]) -> None:
    for name, content in files.items():
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        if callable(content):
            content(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def check_error(rc: int, out: str, err: str, expect: tuple[str, ...]) -> None:
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in out + err
    assert out == "", out
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2, err
    for word in expect:
        assert word in err, (word, err)


@pytest.fixture
def in_case_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)

    def no_pool(settings: Any) -> Any:
        raise AssertionError("a bad-input case got past validation to the worker pool")

    monkeypatch.setattr(nas.search.driver.loop, "default_pool", no_pool)
    if (
        "ray" in sys.modules
    ):  # as a fresh CLI process sees it: no Ray up (the suite's shared one is not the case's)
        monkeypatch.setattr(sys.modules["ray"], "is_initialized", lambda: False)
    return tmp_path


@pytest.mark.parametrize("argv,expect,files", cases())
def test_bad_input(
    argv: list[str],
    expect: tuple[str, ...],
    files: dict[str, Any],
    in_case_dir: Path,
    study: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_case(argv, expect, files, in_case_dir, study, capsys)


def run_case(
    argv: list[str],
    expect: tuple[str, ...],
    files: dict[str, Any],
    in_case_dir: Path,
    study: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Run one bad-input case: exit 2, one line naming ``expect``, the case dir and the shared study unchanged."""
    write_files(in_case_dir, {**BASE_FILES, **files})
    before, db_before = snapshot(in_case_dir), digest(study["db"])
    argv = [a.format(**study) for a in argv]
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse
        rc = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    check_error(rc, out, err, expect)
    assert snapshot(in_case_dir) == before
    assert digest(study["db"]) == db_before


def test_there_are_at_least_30_cases() -> None:
    assert len(cases()) >= 30


@pytest.mark.parametrize(
    "argv,expect,files",
    [
        pytest.param(search("--trials", "0"), ("--trials",), {}, id="trials-zero"),
        pytest.param(
            search(),
            ("space.yaml", "!!python/object/apply:os.system"),
            {"space.yaml": "!!python/object/apply:os.system ['touch pwned']\n"},
            id="yaml-python-object",
        ),
        pytest.param(
            [a for a in search("--address", "127.0.0.1:1") if a != "--local"],
            ("--address", "127.0.0.1:1"),
            {},
            id="address-unreachable",
        ),
    ],
)
def test_bad_input_through_run_search(
    argv: list[str], expect: tuple[str, ...], files: dict[str, Any], tmp_path: Path
) -> None:
    write_files(tmp_path, {**BASE_FILES, **files})
    before = snapshot(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run_search.py"), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    check_error(proc.returncode, proc.stdout, proc.stderr, expect)
    assert snapshot(tmp_path) == before
