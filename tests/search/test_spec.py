"""The experiment spec: one file is the run, every field a flag, the study keeps it whole."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from nas.cli import build_parser, main
from nas.commands.search import resolve_spec
from nas.search.space.load import PATH_FIELDS
from nas.search.storage.records import SPEC
from nas.spec import Spec, differences, is_mutable
from nas.spec.flags import ALL_SECTIONS, _base_type, add_spec_flags, apply, overrides, spec_flags
from nas.spec.sections import SECTIONS
from nas.spec.training import BUDGET_KINDS, TrainRecipe

TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


def _other_value(section: str, name: str, default: Any, kind: type) -> Any:
    """A valid value of the field other than its default, for the all-fields tests."""
    special = {
        ("search", "objective"): "loss",
        ("search", "sampler"): "random",
        ("search", "evaluator"): "proxy:params",
        ("search", "prescreen"): "proxy:params",
        ("search", "hurdles"): [0.25, 0.5],
        ("search", "hurdle_percentile"): 40.0,
        ("search", "population"): 6,
        ("resources", "device"): "cpu",
        ("resources", "address"): "auto",
        ("data", "corpus"): "some/corpus.txt",
        ("data", "tokenizer"): "tok.json",
        ("data", "text_field"): "content",
        ("data", "on_bad_record"): "skip",
        ("recipe", "decay"): "weights_only",
        ("recipe", "schedule"): "wsd",
        ("recipe", "cooldown_frac"): 0.3,
        ("recipe", "cooldown_shape"): "1-sqrt",
        ("recipe", "seq_len"): 8,
        ("recipe", "beta1"): 0.8,
        ("recipe", "beta2"): 0.9,
        ("recipe", "min_lr_ratio"): 0.5,
        ("recipe", "warmup_frac"): 0.2,
        ("recipe", "parametrization"): "completep",
        ("resources", "gpus_per_trial"): 0.5,
    }
    if (section, name) in special:
        return special[(section, name)]
    if kind is bool:
        return not default
    if kind is int:
        return (default or 1) + 3
    if kind is float:
        return (default or 1.0) * 3
    raise AssertionError(f"no test value for {section}.{name}")


def every_field() -> list[tuple[str, str, Any, str]]:
    """(section, field, a non-default value, its flag text) for every field of every section."""
    out = []
    for section, cls in {"recipe": TrainRecipe, **SECTIONS}.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            value = _other_value(section, f.name, f.default, _base_type(hints[f.name]))
            text = (
                ",".join(map(str, value))
                if isinstance(value, list)
                else str(value).lower()
                if isinstance(value, bool)
                else str(value)
            )
            out.append((section, f.name, value, text))
    for kind in BUDGET_KINDS:
        out.append(("budget", kind, 7, "7"))
    return out


FIELDS = every_field()


def _spec_file(tmp_path: Path, section: str, name: str, value: Any) -> Path:
    raw = yaml.safe_load(TINY_SPACE.read_text())
    if section == "budget":
        raw["budget"] = {name: value}
    else:
        raw.setdefault(section, {})[name] = value
    if (section, name) in (("search", "hurdle_percentile"), ("search", "hurdle_min_trials")):
        raw["search"]["hurdles"] = [0.5]  # those apply to hurdles only
    if (section, name) in (("recipe", "cooldown_frac"), ("recipe", "cooldown_shape")):
        raw["recipe"]["schedule"] = "wsd"  # those shape wsd's cooldown only
    if (section, name) in (("recipe", "base_width"), ("recipe", "base_depth")):
        raw["recipe"]["parametrization"] = "completep"  # a base shape applies under completep only
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _value(spec: Spec, section: str, name: str) -> Any:
    if section == "budget":
        return spec.budget.to_dict().get(name)
    value = getattr(getattr(spec, section), name)
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("section,name,value,text", FIELDS, ids=[f"{s}.{n}" for s, n, _, _ in FIELDS])
def test_every_field_keeps_the_files_value_unless_its_flag_is_given(tmp_path, section, name, value, text):
    path = _spec_file(tmp_path, section, name, value)
    args = build_parser().parse_args(["search", "--space", str(path)])
    spec, *_ = resolve_spec(args, spec_flags(args))
    # no flag: the file's value, not the flag's default (a path: relative to the file, nas.files.paths)
    assert _value(spec, section, name) == (
        str(path.parent / value) if f"{section}.{name}" in PATH_FIELDS else value
    )
    # the flag wins; every field has one (--section.field)
    flag_value = (
        _other_value(section, name, value, type(value)) if not isinstance(value, (str, list)) else value
    )
    flag_text = (
        str(flag_value).lower()
        if isinstance(flag_value, bool)
        else (text if flag_value is value else str(flag_value))
    )
    args = build_parser().parse_args(["search", "--space", str(path), f"--{section}.{name}", flag_text])
    spec, *_ = resolve_spec(args, spec_flags(args))
    assert _value(spec, section, name) == flag_value


def test_every_field_has_one_flag_and_short_aliases_name_one_field_each() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_spec_flags(parser)
    dests: dict[str, list[str]] = {}
    for action in parser._actions:  # argparse keeps its actions only here
        dests.setdefault(action.dest, []).extend(action.option_strings)
    for section, name, _, _ in FIELDS:
        assert f"--{section}.{name}" in dests[f"{section}.{name}"]
    aliases = [o for opts in dests.values() for o in opts if o.startswith("--") and "." not in o]
    assert len(aliases) == len(set(aliases))
    assert "--trials" in dests["search.trials"] and "--seed" in dests["recipe.seed"]
    assert "--steps" in dests["budget.steps"] and "--budget-flops" in dests["budget.flops"]


def test_spec_round_trips_through_its_dict() -> None:
    spec = apply(
        Spec.from_dict(yaml.safe_load(TINY_SPACE.read_text())),
        {"search": {"hurdles": (0.5,), "trials": 3}, "budget": {"tokens": 1e5}},
    )
    again = Spec.from_dict(yaml.safe_load(yaml.safe_dump(spec.to_dict())))
    assert again == spec and differences(spec.to_dict(), again.to_dict()) == []


def test_differences_name_each_field_and_what_may_change() -> None:
    spec = Spec.from_dict(yaml.safe_load(TINY_SPACE.read_text()))
    other = apply(
        spec,
        {"search": {"trials": 9, "hurdles": (0.5,)}, "recipe": {"lr": 0.01}, "resources": {"workers": 3}},
    )
    diffs = {key: (a, b) for key, a, b in differences(spec.to_dict(), other.to_dict())}
    assert diffs == {
        "search.trials": (None, 9),
        "search.hurdles": ([], [0.5]),
        "recipe.lr": (0.003, 0.01),
        "resources.workers": (None, 3),
    }
    assert sorted(k for k in diffs if not is_mutable(k)) == ["recipe.lr", "search.hurdles"]
    assert is_mutable("space.description") and not is_mutable("space.globals.d_model")


def test_the_spec_modules_do_not_import_torch() -> None:
    code = "import sys, nas.spec, nas.spec.flags, nas.errors; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def _search(tmp_path: Path, corpus: Path, space: Path | None, study: str, *extra: str) -> int:
    where = ["--space", str(space)] if space is not None else []
    return main(["search", *where, "--study", study, "--storage", f"sqlite:///{tmp_path}/s.db",
                 "--data", str(corpus), "--local", "--no-tensorboard", *extra])  # fmt: skip


def test_a_seed_in_the_file_is_the_run_seed_without_a_flag(tmp_path, corpus, capsys):
    path = _spec_file(tmp_path, "recipe", "seed", 7)
    assert _search(tmp_path, corpus, path, "s", "--trials", "1", "--evaluator", "proxy:params") == 0
    capsys.readouterr()
    assert main(["show", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["seed"] == 7 and shown["settings"]["seed"] == 7 and shown["spec"]["recipe"]["seed"] == 7


def test_show_spec_reproduces_the_study(tmp_path, corpus, capsys):
    assert (
        _search(tmp_path, corpus, TINY_SPACE, "a", "--trials", "2", "--steps", "3", "--hurdles", "0.5") == 0
    )
    capsys.readouterr()
    assert main(["show", "--study", "a", "--storage", f"sqlite:///{tmp_path}/s.db", "--spec"]) == 0
    copy = tmp_path / "a.yaml"
    copy.write_text(capsys.readouterr().out)
    assert _search(tmp_path, corpus, copy, "b") == 0  # trials, budget and hurdles all come from the file
    storage = f"sqlite:///{tmp_path}/s.db"
    a, b = (optuna.load_study(study_name=n, storage=storage) for n in "ab")
    assert len(b.trials) == 2
    for ta, tb in zip(a.trials, b.trials, strict=True):
        assert ta.params == tb.params and ta.values == tb.values
    assert a.user_attrs[SPEC] == b.user_attrs[SPEC]


def test_a_continuation_names_the_fields_that_differ(tmp_path, corpus, capsys):
    assert _search(tmp_path, corpus, TINY_SPACE, "s", "--trials", "1", "--evaluator", "proxy:params",
                   "--hurdles", "0.5") == 0  # fmt: skip
    db = tmp_path / "s.db"
    before = db.read_bytes()
    capsys.readouterr()
    # the same file without the hurdles flag: refused, naming the field, nothing written
    assert _search(tmp_path, corpus, TINY_SPACE, "s", "--trials", "2", "--evaluator", "proxy:params",
                   "--recipe.lr", "0.01") == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "search.hurdles: [0.5] -> []" in err[0] and "recipe.lr: 0.003 -> 0.01" in err[0]
    assert db.read_bytes() == before
    # without --space the study's own spec continues; trials and resources may change
    assert _search(tmp_path, corpus, None, "s", "--trials", "2", "--resources.cpus_per_trial", "2") == 0
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{db}")
    assert len(study.trials) == 2 and study.user_attrs[SPEC]["search"]["trials"] == 2
    assert study.user_attrs[SPEC]["search"]["hurdles"] == [0.5]


def test_a_continuation_from_another_directory_finds_a_relative_corpus(tmp_path, corpus, monkeypatch):
    """`--data corpus.txt` typed in one directory was kept as typed in the study's spec: `search --study S`
    (without --space) run elsewhere said the corpus was not found.  The spec keeps the path absolute."""
    monkeypatch.chdir(corpus.parent)
    argv = ["search", "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db", "--local",
            "--no-tensorboard", "--evaluator", "proxy:params"]  # fmt: skip
    assert main([*argv, "--space", str(TINY_SPACE), "--data", corpus.name, "--trials", "1"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main([*argv, "--trials", "2"]) == 0
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    assert len(study.trials) == 2 and study.user_attrs[SPEC]["data"]["corpus"] == str(corpus)


def test_a_study_recorded_before_a_field_existed_continues(tmp_path, corpus, capsys):
    # A study written by an older version has no search.prescreen in its spec: it ran at the default.
    assert _search(tmp_path, corpus, TINY_SPACE, "s", "--trials", "1", "--evaluator", "proxy:params") == 0
    storage = f"sqlite:///{tmp_path}/s.db"
    study = optuna.load_study(study_name="s", storage=storage)
    old = copy.deepcopy(study.user_attrs[SPEC])
    del old["search"]["prescreen"]
    study.set_user_attr(SPEC, old)
    assert _search(tmp_path, corpus, TINY_SPACE, "s", "--trials", "2", "--evaluator", "proxy:params") == 0
    assert len(optuna.load_study(study_name="s", storage=storage).trials) == 2
    capsys.readouterr()
    # a real change of that field is still named
    assert _search(tmp_path, corpus, TINY_SPACE, "s", "--trials", "3", "--evaluator", "proxy:params",
                   "--prescreen", "proxy:flops") == 2  # fmt: skip
    assert "search.prescreen: None -> 'proxy:flops'" in capsys.readouterr().err


def test_what_files_may_no_longer_say_still_continues_a_study_that_recorded_it(tmp_path, corpus, monkeypatch):
    """globals.vocab_size, a rope_base no candidate uses and a seed no candidate can be are refused in a
    space file; a study an older version ran with them kept them in its spec, and continuing it (or
    confirming it) read that spec through the same checks and was refused, with no file to edit."""
    import nas.search.space.load

    raw = yaml.safe_load(TINY_SPACE.read_text())
    raw["globals"].update(vocab_size=1000, rope_base=[100, 10000])
    raw["seed_archs"] = ["vanilla", "transformer_pp"]
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(raw))
    argv = ["--trials", "1", "--evaluator", "proxy:params"]
    assert _search(tmp_path, corpus, path, "new", *argv) == 2  # a file: refused
    with monkeypatch.context() as m:  # the version that ran it had none of the three rules
        m.setattr(nas.search.space.load, "_refuse_in_files", lambda space: None)
        assert _search(tmp_path, corpus, path, "s", *argv) == 0
    assert _search(tmp_path, corpus, None, "s", "--trials", "2") == 0
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    assert len(study.trials) == 2 and study.user_attrs[SPEC]["globals"]["rope_base"] == [100, 10000]
    # a study from before studies kept their spec: confirm reads it from the (unchanged) space file
    from nas.commands._runs import _search_record

    study.set_user_attr(SPEC, None)
    _, spec, space = _search_record("s", study)
    assert "rope_base" in space.globals and spec.search.evaluator == "proxy:params"


def test_a_bad_field_in_the_file_names_the_file_and_field(tmp_path, capsys):
    path = _spec_file(tmp_path, "search", "trials", 0)
    assert main(["search", "--space", str(path), "--storage", f"sqlite:///{tmp_path}/x.db"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "search.trials" in err[0]
    assert not (tmp_path / "x.db").exists()
    path.write_text(TINY_SPACE.read_text() + "resources: {gpu: 1}\n")
    assert main(["search", "--space", str(path)]) == 2
    assert "resources.gpu: unknown key; valid keys: workers" in capsys.readouterr().err


def test_sections_are_the_commands_own() -> None:
    parser = build_parser()
    train = parser.parse_args(["train", "--arch", "x.yaml", "--budget.steps", "3", "--data", "d"])
    assert overrides(train) == {"budget": {"steps": 3}, "data": {"corpus": "d"}}
    with pytest.raises(SystemExit):  # train runs no trials: no search or worker fields
        parser.parse_args(["train", "--arch", "x.yaml", "--search.trials", "3"])
    confirm = parser.parse_args(["confirm", "--study", "s", "--workers", "1", "--trial", "3,4"])
    assert overrides(confirm) == {"resources": {"workers": 1}}
    assert set(ALL_SECTIONS) == {"recipe", "budget", "data", "search", "resources"}


def test_a_misspelt_data_key_is_refused_not_dropped(tmp_path: Path) -> None:
    """`data: {corpus: books/, tokenizr: tok.json}` once trained on bytes: the typo was taken for a
    field of an exported record and dropped. Only a record's own keys are read as one."""
    from nas.data.corpus import corpus_record
    from nas.errors import ConfigError
    from nas.spec.sections import DATA_RECORD_KEYS, DataSpec

    with pytest.raises(ConfigError, match=r"^data\.tokenizr: unknown key; valid keys: corpus, tokenizer"):
        DataSpec.from_dict({"corpus": "books/", "tokenizr": "tok.json"})
    record = corpus_record("b", {"corpus": "b", "tokenizer": "t.json", "tokenizer_fingerprint": "x"}, 9, "f")
    assert set(record) <= set(DATA_RECORD_KEYS)  # every key an exported record has is read as one
    assert DataSpec.from_dict(record) == DataSpec(corpus="b", tokenizer="t.json")
    # a parallel corpus's record adds its task: an exported seq2seq winner's data is read too
    from nas.data import load_parallel

    for name in ("train.src", "train.tgt", "val.src", "val.tgt"):
        (tmp_path / "pairs").mkdir(exist_ok=True)
        (tmp_path / "pairs" / name).write_text("to be or not\nthat is the question\n")
    parallel = load_parallel(tmp_path / "pairs").record()
    assert (
        set(parallel) <= set(DATA_RECORD_KEYS) and DataSpec.from_dict(parallel).corpus == parallel["corpus"]
    )


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--trials", "5", "--search.trials", "7"], "--trials and --search.trials both set search.trials"),
        (["--budget.steps", "5", "--steps", "7"], "--budget.steps and --steps both set budget.steps"),
        (["--seed", "1", "--recipe.seed", "2"], "--seed and --recipe.seed both set recipe.seed"),
        (  # it stored false without the check, and the last of the two won
            ["--no-tensorboard", "--resources.tensorboard", "true"],
            "--no-tensorboard and --resources.tensorboard both set resources.tensorboard",
        ),
    ],
)
def test_a_field_given_through_two_of_its_names_is_refused(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Which of two values would win was argparse's order, silently; now one line says to give it once."""
    from nas.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["search", *argv, "--evaluator", "proxy:params"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and names in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("argv", "quoted", "converted"),
    [
        (["--recipe.warmup_frac", "2"], "got 2", "2.0"),
        (["--recipe.lr", "-1"], "got -1", "-1.0"),
        (["--recipe.lr", "-1e-3"], "got -1e-3", "-0.001"),  # argparse 3.11 took it for an option
        (["--search.hurdle_percentile", "150"], "got 150", "150.0"),
        (["--budget.seconds", "0"], "got 0", "0.0"),
        (["--search.hurdles", "0.5,0.25"], "got 0.5,0.25", "[0.5, 0.25]"),
        (["--recipe.weight_decay", "-1"], "float32's largest", "3.40282e+38"),
    ],
)
def test_a_flags_bad_value_is_quoted_as_typed(
    argv: list[str], quoted: str, converted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--recipe.warmup_frac 2` was answered `got 2.0`: a value the user never wrote. The line quotes the
    flag's text, and a float32 bound reads as one, not as a number nobody typed."""
    storage = "sqlite:////nonexistent/x.db"
    assert main(["search", *argv, "--evaluator", "proxy:params", "--storage", storage]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"error: {argv[0]}"), err
    assert quoted in err and converted not in err, err


def test_a_rule_between_fields_names_the_flag_given_not_the_field_left_alone(capsys) -> None:
    """`--recipe.schedule wsd --recipe.warmup_frac 0.9` was refused as `recipe.cooldown_frac: ...`, a field
    nobody typed (its default 0.2 and the warmup exceed 1), naming neither a flag nor a file."""
    argv = ["search", "--recipe.schedule", "wsd", "--recipe.warmup_frac", "0.9", "--evaluator",
            "proxy:params", "--storage", "sqlite:////nonexistent/x.db"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: --recipe.warmup_frac: recipe.warmup_frac 0.9 + recipe.cooldown_frac"), err


def test_a_flags_value_refused_by_training_names_the_flag_not_the_file(tmp_path, capsys) -> None:
    """`train --arch a.yaml --recipe.seq_len N` over the architecture's max_len blamed a.yaml."""
    arch = {"vocab_size": 256, "d_model": 16, "n_heads": 2, "max_len": 16,
            "layers": [{"attention": "mha", "ffn": {"activation": "relu", "mult": 2}}]}  # fmt: skip
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump({"arch": arch, "budget": {"steps": 1}}))
    assert main(["train", "--arch", str(path), "--recipe.seq_len", "64", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --recipe.seq_len: 64 exceeds the architecture's max_len 16"), err
    assert str(path) not in err
    path.write_text(yaml.safe_dump({"arch": arch, "recipe": {"seq_len": 64}, "budget": {"steps": 1}}))
    assert main(["train", "--arch", str(path), "--threads", "1"]) == 2  # the file's value: the file
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(path) in err and "recipe.seq_len" in err and "--recipe" not in err, err


def _optional(section: str, name: str) -> bool:
    cls = TrainRecipe if section == "recipe" else SECTIONS.get(section)
    return cls is not None and type(None) in typing.get_args(typing.get_type_hints(cls)[name])


OPTIONAL = [f for f in FIELDS if _optional(f[0], f[1])]


@pytest.mark.parametrize("section,name,value,text", OPTIONAL, ids=[f"{s}.{n}" for s, n, _, _ in OPTIONAL])
def test_null_on_the_command_line_undoes_a_files_value(tmp_path, section, name, value, text):
    """A field whose default is None (`resources.workers`, `search.trials`, ...) set in a file could not be
    undone by a flag: `--workers null` was 'expected an integer', so `--local` beside a file's `workers: 2`
    was refused with no way out but editing the file."""
    path = _spec_file(tmp_path, section, name, value)
    args = build_parser().parse_args(["search", "--space", str(path), f"--{section}.{name}", "null"])
    spec, *_ = resolve_spec(args, spec_flags(args))
    assert _value(spec, section, name) is None


def test_local_beside_a_files_workers_says_how_to_undo_it(tmp_path, capsys) -> None:
    raw = yaml.safe_load(TINY_SPACE.read_text())
    raw["resources"] = {"workers": 2}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["search", "--space", str(path), "--local", "--storage", "sqlite:////nonexistent/x.db"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith(
        "drop resources.workers (--workers), or undo a file's value with --workers null, or run on Ray with "
        "--local false"
    ), err
    args = build_parser().parse_args(["search", "--space", str(path), "--local", "--workers", "null"])
    spec, *_ = resolve_spec(args, spec_flags(args))
    assert spec.resources.local and spec.resources.workers is None
    assert OPTIONAL, "no optional field was found to test"


@pytest.mark.parametrize(
    ("spec", "flag", "from_file", "from_flag"),
    [
        ("data: {tokenizer: gone.json}", ["--tokenizer", "gone2.json"],
         "data.tokenizer {dir}/gone.json: not found", "--tokenizer gone2.json: not found"),
        ("resources: {device: cuda}", ["--device", "cuda"],
         "resources.device cuda: CUDA is not available", "resources.device (--device) cuda: CUDA is not"),
        ("data: {text_field: body}", ["--data.text_field", "body"],
         "data.text_field applies to JSON Lines", "data.text_field applies to JSON Lines"),
    ],
    ids=["tokenizer", "device", "text_field"],
)  # fmt: skip
def test_a_files_device_or_tokenizer_is_blamed_on_the_file_not_on_a_flag_never_typed(
    tmp_path, capsys, spec, flag, from_file, from_flag
) -> None:
    """A space file's tokenizer or device that cannot work was reported as `--tokenizer ...`/`--device`,
    flags the user never typed; the flag is named only when it was typed."""
    import torch

    if "cuda" in spec and torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the file's device works")
    path = tmp_path / "s.yaml"
    head = "globals: {d_model: 32, n_heads: 2, n_layers: 1, max_len: 16}\nlayers: {attention: [mha]}\n"
    path.write_text(head + f"budget: {{steps: 3}}\nsearch: {{trials: 1}}\n{spec}\n")
    argv = ["search", "--space", str(path), "--runs-dir", str(tmp_path / "r"), "--local"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: {from_file.format(dir=tmp_path)}") and "\n" not in err, err
    assert main([*argv, *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {from_flag}") and str(path) not in err, err
    assert not (tmp_path / "r").exists()


def test_a_typed_flag_beside_a_stored_local_says_how_to_leave_local(tmp_path, capsys) -> None:
    """A continued study whose stored spec says `local: true`, with `--workers 2` typed: the only advice
    was undoing a file's value, and no file was given (the way out is `--local false`)."""
    raw = yaml.safe_load(TINY_SPACE.read_text())
    raw["resources"] = {"local": True}
    raw["search"] = {**(raw.get("search") or {}), "trials": 1, "evaluator": "proxy:params"}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    url = f"sqlite:///{tmp_path}/s.db"
    assert main(["search", "--space", str(path), "--study", "s", "--storage", url]) == 0
    capsys.readouterr()
    assert main(["search", "--study", "s", "--storage", url, "--trials", "2", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith("or run on Ray with --local false"), err
