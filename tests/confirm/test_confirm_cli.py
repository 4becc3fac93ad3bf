"""``confirm`` end to end on tiny studies: selection, seed pairing, resume after a kill, bad flags, export."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from nas.cli import main
from nas.confirm.plan import finalists, shape_of
from nas.confirm.runner import existing_runs
from nas.files.archfile import load_arch, load_arch_file
from nas.models import ArchConfig
from nas.shipped import arch_path

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY_SPACE = ROOT / "tests" / "search" / "tiny_space.yaml"


def _search(root: Path, corpus: Path, study: str, *extra: str) -> str:
    url = f"sqlite:///{root}/{study}.db"
    argv = [
        "search",
        "--space",
        str(TINY_SPACE),
        "--study",
        study,
        "--storage",
        url,
        "--data",
        str(corpus),
        "--trials",
        "6",
        "--local",
        "--no-tensorboard",
        *extra,
    ]
    assert main(argv) == 0
    return url


@pytest.fixture(scope="module")
def studies(tmp_path_factory, corpus_dir):
    """A single-objective and a two-objective search of the tiny space (six trials each, 8 steps)."""
    root = tmp_path_factory.mktemp("studies")
    return {
        "one": _search(root, corpus_dir, "one", "--objective", "loss", "--sampler", "random"),
        "two": _search(root, corpus_dir, "two"),
    }


def _load(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def _confirm(url: str, study: str, *extra: str) -> list[str]:
    return ["confirm", "--study", study, "--storage", url, "--local", "--no-tensorboard", *extra]


def test_baselines_are_built_at_each_finalists_shape(studies, capsys):
    """By default each baseline is rebuilt at each finalist's width, heads, depth and context, keeping its
    own blocks, positions and norm, and each finalist is compared with the baselines of its shape."""
    from nas.confirm import ARCHS, Entry

    url = studies["two"]
    study = _load(url, "two")
    finals = finalists(study, 3, None)
    assert main(_confirm(url, "two", "--top", "3", "--seeds", "1", "--scales", "1", "--json")) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    # each run's progress line names it in words: it read '[vanilla 1x seed 0]'
    assert re.search(r"COMPLETE .*\[vanilla[^\]]*, budget 1x, seed \d+\] d\d+", captured.err), captured.err
    conf = _load(url, "two-confirm")
    entries = {e.index: e for e in (Entry.from_dict(d) for d in conf.user_attrs[ARCHS])}
    bases = [entries[i] for i in conf.user_attrs["confirm_plan"]["baselines"]]
    assert out["baselines"] == ["vanilla", "primer_ez", "transformer_pp"]  # the names, not one per shape
    seeds = {
        t.user_attrs["seed_arch"]: ArchConfig.from_dict(t.user_attrs["arch"])
        for t in study.trials
        if t.user_attrs.get("seed_arch")
    }
    for t in finals:
        arch = ArchConfig.from_dict(t.user_attrs["arch"])
        at_shape = [b for b in bases if b.shape == shape_of(arch)]
        assert sorted(b.base_name for b in at_shape) == ["primer_ez", "transformer_pp", "vanilla"], t.number
        for b in at_shape:  # the baseline's own blocks at the finalist's sizes
            own = seeds.get(b.base_name) or load_arch(arch_path(b.base_name))
            assert {layer.to_dict()["attention"]["type"] for layer in b.arch.layers} == {
                layer.to_dict()["attention"]["type"] for layer in own.layers
            }
            assert (b.arch.pos_encoding, b.arch.norm) == (own.pos_encoding, own.norm)
            if b.shape == shape_of(own):  # the search's own seed trial (maybe a finalist too)
                assert b.arch_id == own.arch_id
            else:
                assert b.name.startswith(b.base_name + " (d") and b.role == "baseline"
        row = next(r for r in out["summary"] if r["arch_id"] == arch.arch_id)
        losses = {r["arch_id"]: r["val_loss"] for r in out["runs"]}
        for label, d in row["delta_vs_baseline"].items():  # paired with the baseline of its own shape
            b = next(b for b in at_shape if b.base_name == label)
            assert d["deltas"] == pytest.approx([losses[arch.arch_id] - losses[b.arch_id]])


def test_top_k_is_the_leaderboard_for_one_objective(studies):
    study = _load(studies["one"], "one")
    done = sorted((t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.values[0])
    firsts, seen = [], set()
    for t in done:  # a duplicate architecture counts once
        if t.user_attrs["arch_id"] not in seen:
            seen.add(t.user_attrs["arch_id"])
            firsts.append(t.number)
    assert [t.number for t in finalists(study, 2, None)] == firsts[:2]
    assert [t.number for t in finalists(study, 1, [firsts[2], firsts[0]])] == [firsts[2], firsts[0]]


def test_top_k_is_the_pareto_front_by_loss_for_two_objectives(studies):
    study = _load(studies["two"], "two")
    front = sorted(study.best_trials, key=lambda t: t.values[0])
    chosen = finalists(study, 50, None)
    expected, seen = [], set()
    for t in front:  # lowest loss first; a duplicate architecture counts once
        if t.user_attrs["arch_id"] not in seen:
            seen.add(t.user_attrs["arch_id"])
            expected.append(t.number)
    assert [t.number for t in chosen] == expected
    assert finalists(study, 1, None) == chosen[:1]


def test_seeds_are_paired_and_the_first_reproduces_the_search(studies, capsys):
    url = studies["one"]
    # baselines at their own shape: two baselines, whatever shapes the finalists have
    assert main(_confirm(url, "one", "--top", "2", "--seeds", "2", "--scales", "1,2",
                         "--baseline-shape", "own", "--json")) == 0  # fmt: skip
    conf = _load(url, "one-confirm")
    runs = existing_runs(conf)
    # 2 finalists and the baselines vanilla, primer_ez and transformer_pp (the seeds often win a
    # six-trial search, so one or both finalists may be baselines too)
    n_arch = len(conf.user_attrs["confirm_plan"]["wanted"])
    assert n_arch in (3, 4, 5) and len(conf.user_attrs["confirm_plan"]["baselines"]) == 3
    assert len(runs) == n_arch * 2 * 2  # 2 scales, 2 seeds
    assert all(t.state == TrialState.COMPLETE for t in runs.values())
    search = {t.user_attrs["arch_id"]: t.values[0] for t in _load(url, "one").trials if t.values}
    reproduced = 0
    for run, t in runs.items():
        assert (t.user_attrs["seed"], t.user_attrs["scale"]) == (run.seed, run.scale)
        if run.seed == 0 and run.scale == 1 and t.user_attrs["arch_id"] in search:  # not transformer_pp
            # the search trained every trial with recipe seed 0: the same init stream and batch order
            assert t.values[0] == search[t.user_attrs["arch_id"]]
            reproduced += 1
    assert reproduced >= 3  # the finalists and the seed baselines
    by_arch: dict[str, dict[int, float]] = {}
    for run, t in runs.items():
        if run.scale == 1:
            by_arch.setdefault(t.user_attrs["arch_id"], {})[run.seed] = t.values[0]
    assert all(losses[0] != losses[1] for losses in by_arch.values())  # another seed is another draw
    import json

    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"runs", "summary", "rank_correlation"}
    assert len(out["runs"]) == n_arch * 4 and len(out["summary"]) == n_arch * 2
    for r in out["runs"]:  # each run row says its bits/byte and throughput too
        assert r["val_bpb"] == pytest.approx(r["val_loss"] / math.log(2)) and r["tokens_per_s"] > 0
    row = next(
        r for r in out["summary"] if r["role"] == "finalist" and r["scale"] == 1 and r["delta_vs_baseline"]
    )
    base = next(iter(row["delta_vs_baseline"]))
    mine = {
        r["seed"]: r["val_loss"] for r in out["runs"] if r["arch_id"] == row["arch_id"] and r["scale"] == 1
    }
    theirs = {r["seed"]: r["val_loss"] for r in out["runs"] if r["name"] == base and r["scale"] == 1}
    assert row["delta_vs_baseline"][base]["deltas"] == pytest.approx([mine[s] - theirs[s] for s in (0, 1)])
    # the row's cost columns are its runs' (bits/byte over seeds, the architecture's size, mean speed)
    at = [r for r in out["runs"] if r["arch_id"] == row["arch_id"] and r["scale"] == 1]
    assert row["bpb_mean"] == pytest.approx(sum(r["val_bpb"] for r in at) / 2)
    assert row["params"] == at[0]["params"] > 0 and row["flops_per_token"] == at[0]["flops_per_token"] > 0
    assert row["steps"] == pytest.approx(sum(r["steps"] for r in at) / 2)

    # the same command again runs nothing; export --confirmed writes the winner with its summary
    n = len(conf.trials)
    assert (
        main(_confirm(url, "one", "--top", "2", "--seeds", "2", "--scales", "1,2", "--baseline-shape", "own"))
        == 0
    )
    assert len(_load(url, "one-confirm").trials) == n
    # --report: written, and rewritten by the same command again (a file confirm did not write is refused)
    report = Path(url[len("sqlite:///") :]).parent / "confirm.md"
    for _ in range(2):
        assert (
            main(
                _confirm(
                    url,
                    "one",
                    "--top",
                    "2",
                    "--seeds",
                    "2",
                    "--scales",
                    "1,2",
                    "--baseline-shape",
                    "own",
                    "--report",
                    str(report),
                )
            )
            == 0
        )
        text = report.read_text()
        assert (
            text.startswith("# Confirmation of study 'one'")
            and "| architecture | bits/byte mean ± sd |" in text
        )
    assert len(_load(url, "one-confirm").trials) == n
    out_file = Path(url[len("sqlite:///") :]).parent / "confirmed.yaml"
    assert main(["export", "--study", "one", "--storage", url, "--confirmed", "--out", str(out_file)]) == 0
    text = out_file.read_text()
    assert text.startswith("# Confirmed winner of study 'one'")
    doc = load_arch_file(out_file)
    assert doc["budget"] == {"steps": 16}  # the largest scale decided: 2 x 8 steps
    assert [r["scale"] for r in doc["confirmed"]["scales"]] == [1.0, 2.0]


def test_lr_sweep_picks_the_best_lr_per_arch_and_scale(studies, capsys):
    url = studies["two"]
    assert (
        main(
            _confirm(
                url,
                "two",
                "--trial",
                "0",
                "--baseline",
                "vanilla",
                "--seeds",
                "2",
                "--scales",
                "1",
                "--lrs",
                "1e-4,3e-3",
                "--json",
            )
        )
        == 0
    )
    out = __import__("json").loads(capsys.readouterr().out)
    for row in out["summary"]:
        sweep = {
            r["lr"]: r["val_loss"] for r in out["runs"] if r["arch_id"] == row["arch_id"] and r["seed"] == 0
        }
        assert set(sweep) == {1e-4, 3e-3}
        assert row["lr"] == min(sweep, key=sweep.get)
        assert {r["lr"] for r in out["runs"] if r["arch_id"] == row["arch_id"] and r["seed"] == 1} == {
            row["lr"]
        }


def test_resume_after_the_driver_is_killed(tmp_path, corpus_dir):
    url = _search(tmp_path, corpus_dir, "k")
    flags = ["--top", "1", "--seeds", "3", "--scales", "1,30"]
    argv = [sys.executable, str(ROOT / "run_search.py"), *_confirm(url, "k", *flags)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        states: list[TrialState] = []
        # until two runs have finished and a third is training (a 30x run trains for about a second)
        while proc.poll() is None and not (
            states.count(TrialState.COMPLETE) >= 2 and TrialState.RUNNING in states
        ):
            time.sleep(0.1)
            try:
                states = [t.state for t in _load(url, "k-confirm").trials]
            except KeyError:  # not created yet
                pass
        assert proc.poll() is None, "the confirmation finished before it could be killed"
        proc.send_signal(signal.SIGKILL)  # no clean-up at all: its running trial stays RUNNING
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed = _load(url, "k-confirm").trials
    before = {t.number: t.values for t in killed if t.state == TrialState.COMPLETE}
    # what was running when the driver died (under load a run may just have ended before the kill)
    stale = [t.number for t in killed if t.state == TrialState.RUNNING]
    assert main(_confirm(url, "k", *flags)) == 0
    conf = _load(url, "k-confirm")
    runs = existing_runs(conf)
    entries = len(conf.user_attrs["confirm_plan"]["wanted"])
    assert len(runs) == entries * 2 * 3  # every (arch, scale, seed) once
    assert all(t.state == TrialState.COMPLETE for t in runs.values())
    complete = [t for t in conf.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == len(runs)  # nothing finished ran twice
    assert len(before) >= 2 and all(conf.trials[n].values == v for n, v in before.items())
    assert all(
        conf.trials[n].state == TrialState.FAIL and conf.trials[n].user_attrs.get("requeued_as")
        for n in stale
    )


def _exit_code(argv: list[str]) -> int:
    """main's status, or the one argparse exits with (a flag's type check)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


def _snapshot(url: str) -> list[tuple[str, int]]:
    return sorted((s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--trial", "99"], "--trial 99: study 'one' has trials 0..5"),
        (["--trial", "1,x"], "--trial '1,x': 'x' is not a number"),
        (["--scales", "0"], "--scales '0': each value must be a number > 0, got 0"),
        (["--scales", "1,-4"], "--scales '1,-4': each value must be a number > 0, got -4"),
        (["--lrs", "nan"], "--lrs 'nan': each value must be a number > 0"),
        # a run trains whole steps: 0.3 of 8 steps trained 2 and was reported as scale 0.3 (1e-9 as 1e-09)
        (["--scales", "0.3"], "--scales 0.3: the study's budget is 8 steps, so 0.3 of it is 2.4 steps"),
        (["--scales", "1e-9"], "a run trains whole steps; give 0.125 (1 step)"),
        (["--scales", "1,1.01"], "--scales 1 and 1.01: both are 8 steps of the study's 8; give one"),
        (["--top", "0"], "--top: must be a positive integer, got '0'"),
        (["--seeds", "0"], "--seeds: must be a positive integer, got '0'"),
        (["--baseline", "no_such.yaml"], "no_such.yaml: architecture file not found"),
        (
            ["--workers", "2"],
            "resources.local (--local) runs trials one at a time in this process, without Ray; drop "
            "resources.workers (--workers)",
        ),
        (["--keep-weights", "2"], "resources.keep_weights (--keep-weights): confirm keeps no weights"),
        # a repeated list item is refused, not merged (issue 36's class, found again by an adversarial pass)
        (["--baseline", "vanilla", "--baseline", "vanilla"], "--baseline 'vanilla' is given twice"),
        (
            ["--baseline", "vanilla", "--baseline", str(arch_path("vanilla"))],
            "is the same architecture as 'vanilla'; give each baseline once",
        ),
    ],
)
def test_bad_flags_are_one_line_exit_2_and_create_nothing(studies, tmp_path, capsys, flags, message):
    url = studies["one"]
    before = _snapshot(url)
    report = tmp_path / "confirm.md"
    assert _exit_code(_confirm(url, "one", "--report", str(report), *flags)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert _snapshot(url) == before and not report.exists()


@pytest.mark.parametrize("command", ["confirm", "ladder"])
def test_help_lists_only_the_resources_the_command_takes(command, capsys):
    """`--resources.keep_weights` is refused by confirm and ladder; their --help no longer offers it."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "--resources.workers" in out and "keep_weights" not in out and "--keep-weights" not in out


def test_a_study_without_complete_trials_is_refused(studies, tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/empty.db"
    src = _load(studies["one"], "one")
    study = optuna.create_study(study_name="empty", storage=url)
    study.set_user_attr("settings", src.user_attrs["settings"])
    study.tell(study.ask(), state=TrialState.FAIL)
    before = _snapshot(url)
    assert main(_confirm(url, "empty")) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --study 'empty' has no trained COMPLETE trial to confirm"
    assert _snapshot(url) == before


def test_a_confirmation_is_not_confirmed_again(studies, capsys):
    url = studies["one"]
    if "one-confirm" not in {s for s, _ in _snapshot(url)}:
        assert main(_confirm(url, "one", "--top", "1", "--seeds", "1", "--scales", "1")) == 0
        capsys.readouterr()
    assert main(_confirm(url, "one-confirm")) == 2
    # one line (a note on what the study is used to come first)
    assert (
        capsys.readouterr().err
        == "error: --study 'one-confirm' is a confirmation; pass the search study 'one'\n"
    )


def test_a_refused_confirmation_queues_nothing(studies, tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/one.db"  # a copy: the module's study stays as it was
    optuna.copy_study(from_study_name="one", from_storage=studies["one"], to_storage=url)
    assert main(_confirm(url, "one", "--top", "1", "--seeds", "1", "--scales", "1")) == 0
    confirm = _load(url, "one-confirm")
    spec = copy.deepcopy(confirm.user_attrs["spec"])
    spec["recipe"]["lr"] = 0.5  # as if the confirmation had run under another recipe
    confirm.set_user_attr("spec", spec)
    before = len(confirm.trials)
    capsys.readouterr()
    assert main(_confirm(url, "one", "--top", "1", "--seeds", "2", "--scales", "1")) == 2
    err = capsys.readouterr().err
    assert "recipe.lr: 0.5 -> 0.003" in err and len(err.strip().splitlines()) == 1
    trials = _load(url, "one-confirm").trials
    assert len(trials) == before and not [t for t in trials if t.state == TrialState.WAITING]


def test_a_confirmation_another_driver_runs_is_refused_before_anything_is_written(studies, tmp_path, capsys):
    """A second confirm while one ran used to rewrite the plan and queue its runs (which the running one
    then took up) before the driver's lease refused it."""
    from nas.search.storage.lease import DriverLease
    from nas.search.storage.urls import open_storage

    url = f"sqlite:///{tmp_path}/one.db"  # a copy: the module's study stays as it was
    optuna.copy_study(from_study_name="one", from_storage=studies["one"], to_storage=url)
    assert main(_confirm(url, "one", "--top", "1", "--seeds", "1", "--scales", "1")) == 0
    # the driver's first line names no search's budget per trial, objective or sampler: runs are fixed
    assert "; each run on its scale times the budget 8 steps\n" in capsys.readouterr().out
    before = _load(url, "one-confirm")  # a Study reads the storage when asked: its state, copied now
    attrs, trials = copy.deepcopy(before.user_attrs), len(before.trials)
    lease = DriverLease(open_storage(url), "one-confirm")  # as a confirm running it now holds it
    lease.acquire()
    try:
        assert main(_confirm(url, "one", "--top", "2", "--seeds", "2", "--scales", "1,4")) == 2
    finally:
        lease.release()
    err = capsys.readouterr().err
    assert "is being run by another driver" in err and len(err.strip().splitlines()) == 1, err
    after = _load(url, "one-confirm")
    assert after.user_attrs == attrs and len(after.trials) == trials


def test_runs_that_failed_for_a_fixed_reason_are_run_again(studies, monkeypatch, capsys, tmp_path):
    import nas.execution.local_pool as local_pool

    url = f"sqlite:///{tmp_path}/one.db"  # a copy: the module's study stays as it was
    optuna.copy_study(from_study_name="one", from_storage=studies["one"], to_storage=url)
    flags = ["--top", "1", "--seeds", "1", "--scales", "1"]
    real = local_pool.run_trial
    monkeypatch.setattr(
        local_pool, "run_trial", lambda payload: {"status": "failed", "reason": "error: disk full"}
    )
    assert main(_confirm(url, "one", *flags)) == 0
    assert {t.state for t in _load(url, "one-confirm").trials} == {TrialState.FAIL}
    capsys.readouterr()
    assert (
        main(["export", "--study", "one", "--storage", url, "--confirmed", "--out", str(tmp_path / "w.yaml")])
        == 2
    )
    err = capsys.readouterr().err
    assert "failed" in err and "disk full" in err and "re-runs failed runs" in err
    monkeypatch.setattr(local_pool, "run_trial", real)  # the cause is fixed: the same command runs them again
    assert main(_confirm(url, "one", *flags)) == 0
    runs = existing_runs(_load(url, "one-confirm"))
    assert runs and all(t.state == TrialState.COMPLETE for t in runs.values())
    assert (
        main(["export", "--study", "one", "--storage", url, "--confirmed", "--out", str(tmp_path / "w.yaml")])
        == 0
    )
    assert load_arch_file(tmp_path / "w.yaml")
    # a confirm study is not a search: search refuses it untouched, the read commands say what it is
    before = [(t.number, t.state, t.values) for t in _load(url, "one-confirm").trials]
    capsys.readouterr()
    assert main(["search", "--study", "one-confirm", "--storage", url, "--trials", "50", "--local"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "is the confirmation of study 'one'" in err[0] and "confirm --study one" in err[0]
    )
    assert [(t.number, t.state, t.values) for t in _load(url, "one-confirm").trials] == before
    assert main(["best", "--study", "one-confirm", "--storage", url]) == 0
    assert "note: study 'one-confirm' is the confirmation of study 'one'" in capsys.readouterr().err


def _stop_after_one_run(monkeypatch) -> None:
    """Make every confirm stop after one more run, as an interrupted one does (the rest stay queued)."""
    import nas.confirm.runner as runner
    from nas.search.storage.study import count_done

    def one_run(run, study, entries, pools, out):
        if any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False)):
            runner.ConfirmDriver(run, entries, pools, out, trials=count_done(study) + 1).run()

    monkeypatch.setattr(runner, "drive_queue", one_run)


def test_export_confirmed_names_no_winner_from_an_unfinished_comparison(
    studies, monkeypatch, capsys, tmp_path
):
    """An interrupted confirm leaves one architecture measured at the largest scale: export --confirmed
    refuses (exit 2, one line naming what is missing and the command that finishes it, nothing
    written) instead of calling it the winner there; that command finishes it, and then it exports."""
    url = f"sqlite:///{tmp_path}/one.db"  # a copy: the module's study stays as it was
    optuna.copy_study(from_study_name="one", from_storage=studies["one"], to_storage=url)
    assert main(_confirm(url, "one", "--top", "1", "--seeds", "2", "--scales", "1")) == 0
    with monkeypatch.context() as m:
        _stop_after_one_run(m)
        assert main(_confirm(url, "one", "--top", "1", "--seeds", "2", "--scales", "1,2")) == 0
    done = [t for t in _load(url, "one-confirm").trials if t.state == TrialState.COMPLETE]
    assert [t.user_attrs["scale"] for t in done].count(2.0) == 1  # one architecture measured at 2x
    capsys.readouterr()
    out = tmp_path / "w.yaml"
    export = ["export", "--study", "one", "--storage", url, "--confirmed", "--out", str(out)]
    assert main(export) == 2
    err = capsys.readouterr().err.strip()
    n_arch = len(_load(url, "one-confirm").user_attrs["confirm_plan"]["wanted"])
    finish = f"confirm --study one --storage {url} --top 1 --seeds 2 --scales 1,2"
    assert len(err.splitlines()) == 1, err
    assert f"is not finished: {2 * n_arch - 1} run(s) have no result ({2 * n_arch - 1} at 2x)" in err, err
    assert f"{finish}` finishes it" in err, err
    assert not out.exists()
    # the command it names finishes the comparison; then the winner is the best over every architecture
    assert main(["confirm", *finish.split()[1:], "--local", "--no-tensorboard"]) == 0
    assert main(export) == 0
    doc = load_arch_file(out)
    assert doc["budget"] == {"steps": 16}
    report = capsys.readouterr()
    conf = _load(url, "one-confirm")
    at2 = {}
    for t in conf.trials:
        if t.state == TrialState.COMPLETE and t.user_attrs["scale"] == 2.0:
            at2.setdefault(t.user_attrs["arch_id"], []).append(t.values[0])
    assert all(len(v) == 2 for v in at2.values()) and len(at2) == n_arch
    winner = min(at2, key=lambda a: sum(at2[a]))
    assert doc["source"]["arch_id"] == winner, report


def test_export_of_a_confirm_run_writes_its_own_seed_and_budget(studies, capsys, tmp_path):
    """export --best / --trial on a confirm study writes the run's seed, lr and budget at its scale (not
    the search's 1x budget and seed), and the retrain it prints gives the run's loss again."""
    url = f"sqlite:///{tmp_path}/one.db"
    optuna.copy_study(from_study_name="one", from_storage=studies["one"], to_storage=url)
    flags = ["--top", "1", "--seeds", "2", "--scales", "1,2", "--baseline", "vanilla"]
    assert main(_confirm(url, "one", *flags)) == 0
    conf = _load(url, "one-confirm")
    run = next(
        t
        for t in conf.trials
        if t.state == TrialState.COMPLETE and t.params["seed"] == 1 and t.params["scale"] == 2.0
    )
    capsys.readouterr()
    for which in (["--trial", str(run.number)], ["--best"]):
        out = tmp_path / f"{which[0][2:]}.yaml"
        assert main(["export", "--study", "one-confirm", "--storage", url, *which, "--out", str(out)]) == 0
        doc = load_arch_file(out)
        t = (
            run
            if which[0] == "--trial"
            else min((t for t in conf.trials if t.state == TrialState.COMPLETE), key=lambda t: t.values[0])
        )
        assert doc["recipe"]["seed"] == t.params["seed"] and doc["recipe"]["lr"] == t.params["lr"]
        assert doc["budget"] == {"steps": round(8 * t.params["scale"])}
        assert doc["source"]["confirms"] == "one"
    printed = capsys.readouterr().out
    retrain = next(line for line in printed.splitlines() if line.startswith("retrain it with:"))  # --trial's
    argv = retrain.split(":", 1)[1].split()[1:]  # after the program's name
    assert argv[:3] == ["train", "--arch", str(tmp_path / "trial.yaml")]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["val_loss"] == pytest.approx(run.values[0], abs=1e-6)


def test_confirm_refuses_a_study_whose_data_changed(studies, tmp_path, capsys):
    """confirm checks the data as a continued search does: the corpus changed since the search is one
    line, exit 2, and nothing is created (no confirm study)."""
    from synthetic_text import write_corpus

    corpus = write_corpus(tmp_path / "corpus", 12)
    url = _search(tmp_path, corpus, "d", "--objective", "loss", "--trials", "2")
    (corpus / "doc_00.txt").write_text("other text than the search trained on\n" * 200)
    before = _snapshot(url)
    capsys.readouterr()
    assert main(_confirm(url, "d", "--top", "1", "--seeds", "1", "--scales", "1")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--study 'd' was run on other data" in err and "needs the data the search ran on" in err, err
    assert _snapshot(url) == before


def test_the_first_seed_is_the_searchs_training_seed_not_its_samplers(tmp_path, corpus_dir, capsys):
    """With ``search.seed`` set, the sampler's seed differs from the seed every trial trained with
    (``recipe.seed``); confirm's first seed is the training seed, so its first run repeats the search's."""
    seeds = ["--search.seed", "7", "--recipe.seed", "3"]
    url = _search(tmp_path, corpus_dir, "sd", "--objective", "loss", "--sampler", "random", *seeds)
    flags = ["--top", "1", "--seeds", "1", "--scales", "1", "--baseline", "vanilla"]
    assert main(_confirm(url, "sd", *flags)) == 0
    capsys.readouterr()
    conf = _load(url, "sd-confirm")
    assert conf.user_attrs["confirm_plan"]["seeds"] == [3]
    search = {t.user_attrs["arch_id"]: t.values[0] for t in _load(url, "sd").trials if t.values}
    finalist = next(t for t in conf.trials if t.user_attrs["role"] == "finalist")
    assert finalist.values[0] == search[finalist.user_attrs["arch_id"]]


@pytest.mark.parametrize("command", ["confirm", "ladder"])
def test_a_report_never_replaces_a_baseline_file_it_reads(command, studies, tmp_path, capsys):
    """`--report` pointed at a `--baseline` file with --force would have replaced the architecture the
    command was reading: refused in one line, and the file is untouched."""
    base = tmp_path / "mine.yaml"
    base.write_bytes(Path(arch_path("vanilla")).read_bytes())
    before = base.read_bytes()
    argv = _confirm(studies["one"], "one", "--baseline", str(base), "--report", str(base), "--force")
    argv[0] = command
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the --baseline file this command reads" in err[0], err
    assert base.read_bytes() == before


def test_a_study_with_rungs_is_listed_and_confirmed_and_a_scale_too_short_for_them_is_refused(
    tmp_path, corpus_dir, capsys
):
    """A wsd search with rungs records its budget as {steps, rungs}: `best` and the confirm report ended in
    a ValueError traceback on it; a scale whose runs cannot place the rungs (or buy no step) was queued,
    and every run at it failed (FAIL ConfigError): now refused in one line before anything is written."""
    wsd = ["--recipe.schedule", "wsd", "--budget.rungs", "0.5", "--steps", "4", "--trials", "1"]
    url = _search(tmp_path, corpus_dir, "w", "--objective", "loss", "--sampler", "random", *wsd)
    capsys.readouterr()
    assert main(["best", "--study", "w", "--storage", url]) == 0
    assert "budget 4 steps (rungs 0.5) per trial" in capsys.readouterr().out
    before = _snapshot(url)
    flags = ["--top", "1", "--seeds", "1", "--baseline", "vanilla"]
    assert main(_confirm(url, "w", *flags, "--scales", "0.25,1")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --scales 0.25: trial 0"), err
    assert "trains on 1 step (rungs 0.5): budget.rungs: rung 0.5 of 1 step buys 0 steps" in err, err
    assert err.endswith("give larger --scales\n"), err
    assert _snapshot(url) == before
    assert main(_confirm(url, "w", *flags, "--scales", "1")) == 0
    assert "of the search's budget (4 steps (rungs 0.5))" in capsys.readouterr().out
    assert len(_load(url, "w-confirm").trials) == 2


@pytest.mark.parametrize("command", ["confirm", "ladder"])
def test_the_recorded_plan_flags_name_a_baseline_file_from_anywhere(command, tmp_path, monkeypatch):
    """`--baseline mine.yaml` was recorded as typed: `export --confirmed` told a user in another directory
    to finish with `confirm ... --baseline mine.yaml`, another file (or none) there.  A file is recorded
    absolute; a shipped name stays a name."""
    from nas.cli import build_parser
    from nas.commands import confirm, ladder

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_bytes(Path(arch_path("vanilla")).read_bytes())
    args = build_parser().parse_args(
        [command, "--study", "s", "--baseline", "mine.yaml", "--baseline", "vanilla"]
    )
    flags = (confirm if command == "confirm" else ladder).plan_flags(args)
    assert f"--baseline {tmp_path / 'mine.yaml'} --baseline vanilla" in flags
