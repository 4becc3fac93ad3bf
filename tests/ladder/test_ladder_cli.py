"""``ladder`` end to end on a tiny study: predictions, intervals, its plot, resume after Ctrl-C, refusals."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from nas.cli import main
from nas.confirm.runner import existing_runs

# end to end: a real search and a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SPACE = """
name: ladder-tiny
globals: {d_model: 32, n_heads: 4, n_layers: 2, max_len: 16}
layers:
  attention: {mha: {}, mdha: {kernel: 3}}
  ffn: {activation: [relu, squared_relu], mult: 2}
recipe: {batch_size: 4, eval_batches: 2, log_every: 4}
budget: {steps: 24}
"""
#: d16 L1, d24 L2, d32 L2 (the search's shape) and d48 L3
SIZES = "0.125,0.42,1,3.4"


def _search(root: Path, corpus: Path, study: str, budget: str = "") -> str:
    space = root / f"{study}.yaml"
    text = SPACE.replace("budget: {steps: 24}\n", budget) if budget else SPACE
    space.write_text(text, encoding="utf-8")
    url = f"sqlite:///{root}/{study}.db"
    argv = [
        "search",
        "--space",
        str(space),
        "--study",
        study,
        "--storage",
        url,
        "--data",
        str(corpus),
        "--trials",
        "2",
        "--local",
        "--no-tensorboard",
        "--objective",
        "loss",
        "--sampler",
        "random",
    ]
    assert main(argv) == 0
    return url


def _ladder(url: str, study: str, *extra: str) -> list[str]:
    # where runs train (--local, --no-tensorboard): refused with --no-train, which trains none
    where = [] if "--no-train" in extra else ["--local", "--no-tensorboard"]
    return ["ladder", "--study", study, "--storage", url, *where, "--baseline", "vanilla", "--sizes", SIZES,
            *extra]  # fmt: skip


@pytest.fixture(scope="module")
def searched(tmp_path_factory, corpus_dir):
    root = tmp_path_factory.mktemp("ladder")
    return root, _search(root, corpus_dir, "s")


def test_a_ladder_predicts_with_intervals_and_p_best_and_writes_its_plot(searched, capsys):
    root, url = searched
    report = root / "ladder.md"
    assert main(_ladder(url, "s", "--check", "--json", "--report", str(report), "--samples", "50")) == 0
    out = json.loads(capsys.readouterr().out)
    fams = {f["name"]: f for f in out["families"]}
    assert len(fams) == 2 and {f["role"] for f in fams.values()} == {"finalist", "baseline"}
    assert out["runs"]["complete"] == out["runs"]["planned"] == 2 * 4
    p_best = 0.0
    for f in fams.values():
        assert f["sizes"] == 4 and f["runs"] == 4 and f["points"] == 4 * 3  # two rungs and the end
        assert set(f["fit"]) >= {"E", "A", "alpha", "B", "beta"}
        pred = f["prediction"]
        assert pred["low"] <= pred["high"] and 0 <= pred["p_best"] <= 1
        assert pred["beyond"]["compute"] == pytest.approx(10.0, rel=0.6)  # the default target: 10x
        p_best += pred["p_best"]
    assert p_best == pytest.approx(1.0)
    assert out["ranking"] == sorted(fams, key=lambda k: fams[k]["prediction"]["loss"])
    # each point is a run's rung or its end, as the trial recorded it
    study = optuna.load_study(study_name="s-ladder", storage=url)
    t = next(t for t in study.trials if t.state == TrialState.COMPLETE)
    row = next(r for r in out["runs"]["rows"] if r["trial"] == t.number)
    rungs = [r["val_loss"] for r in t.user_attrs["rungs"]]
    assert [p["val_loss"] for p in row["points"]] == [*rungs, t.values[0]]
    check = out["check"]
    assert check["held_out_size"] == 3.4 and check["fitted_sizes"] == [0.125, 0.42, 1.0]
    assert {r["family"] for r in check["rows"]} <= set(fams)
    text = report.read_text(encoding="utf-8")
    assert "| rank | architecture |" in text and "## Held out: size 3.4" in text
    assert "![ladder_ladder](ladder_ladder.png)" in text
    assert (root / "ladder_ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_new_target_reports_again_without_training(searched, capsys):
    root, url = searched
    few = ("--samples", "20")  # reports only: a short bootstrap (each report's 200 draws took ~5 s)
    assert main(_ladder(url, "s", "--json", *few)) == 0  # the runs are there: nothing trains
    capsys.readouterr()
    before = len(optuna.load_study(study_name="s-ladder", storage=url).trials)
    assert main(_ladder(url, "s", "--json", "--target-flops", "1e12", "--target-size", "8", *few)) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(optuna.load_study(study_name="s-ladder", storage=url).trials) == before
    assert out["target"] == {"flops": 1e12, "size": 8.0, "given": True, "allocation": "at size"}
    for f in out["families"]:
        assert f["prediction"]["params"] > max(p["params"] for p in f["measured"])  # size 8 > 3.4
    # a target under every measured point is an extrapolation too: said as such, not "inside"
    assert main(_ladder(url, "s", "--json", "--no-train", "--target-flops", "10", *few)) == 0
    low = json.loads(capsys.readouterr().out)
    assert all(f["prediction"]["below"]["compute"] < 1e-3 for f in low["families"])
    assert main(_ladder(url, "s", "--no-train", "--target-flops", "10", *few)) == 0
    io = capsys.readouterr()
    assert "x the smallest" in io.out and "note: --no-train" not in io.err  # the plan flags the study has
    # plan flags that choose other runs are said to choose nothing under --no-train (they were ignored)
    assert main(_ladder(url, "s", "--no-train", "--seeds", "3", "--scale", "2", *few)) == 0
    err = capsys.readouterr().err
    assert "note: --no-train reports the runs the study holds; --seeds 3 --scale 2 would choose others" in err
    assert main([*_ladder(url, "s", "--no-train", *few), "--json", "--form", "shared"]) == 0
    shared = json.loads(capsys.readouterr().out)
    assert all(f["fit"]["alpha"] == f["fit"]["beta"] for f in shared["families"])


def test_ctrl_c_then_again_trains_only_what_is_missing(tmp_path, corpus_dir):
    url = _search(tmp_path, corpus_dir, "k")
    argv = [sys.executable, str(ROOT / "run_search.py"), *_ladder(url, "k", "--seeds", "2")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Ctrl-C reaches it even where the suite itself was started in the background (`cmd &` in a script
    # ignores SIGINT, and its children inherit that: every run then finished, and this test failed)
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    try:
        states: list[TrialState] = []
        while proc.poll() is None and states.count(TrialState.COMPLETE) < 3:
            time.sleep(0.1)
            try:
                states = [t.state for t in optuna.load_study(study_name="k-ladder", storage=url).trials]
            except KeyError:  # not created yet
                pass
        assert proc.poll() is None, "the ladder finished before it could be interrupted"
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = optuna.load_study(study_name="k-ladder", storage=url).trials
    before = {t.number: t.values for t in first if t.state == TrialState.COMPLETE}
    assert 3 <= len(before) < 16
    assert main(_ladder(url, "k", "--seeds", "2")) == 0
    study = optuna.load_study(study_name="k-ladder", storage=url)
    runs = existing_runs(study)
    assert len(runs) == 2 * 4 * 2 and all(t.state == TrialState.COMPLETE for t in runs.values())
    assert sum(t.state == TrialState.COMPLETE for t in study.trials) == len(runs)  # none trained twice
    assert all(study.trials[n].values == v for n, v in before.items())


def _exit(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--sizes", "0.5,1"], "a ladder needs 3 sizes or more"),
        (["--sizes", "1,2,2"], "lists 2 twice"),
        (["--rungs", "0.5,0.25"], "--rungs"),
        (["--rungs", "1.5"], "--rungs"),
        (["--target-flops", "-1"], "--target-flops -1: must be a number > 0"),
        (["--target-size", "1000"], "--target-size 1000: must be a number > 0 and at most 64"),
        (["--scale", "0"], "--scale 0: must be a number > 0"),
        (["--sizes", "0.125,1,100"], "each value must be in [1e-06, 64], got 100"),
        (["--samples", "100000000"], "--samples 100000000: at most 10,000 bootstrap draws"),  # filled memory
        # one draw gave zero-width "5th to 95th percentile" intervals excluding their own prediction
        (["--samples", "1"], "--samples 1: the report's 5th-95th percentile intervals and p(best) need at"),
        (["--samples", "19"], "need at least 20 bootstrap draws"),
        (["--scale", "-inf"], "--scale -inf: must be a number > 0"),  # argparse took -inf for an option
        (["--share", "A"], "--share 'A': valid: none, E, E,exponents"),
        (["--check", "sideways"], "--check 'sideways': valid: heldout, rollout, none"),
    ],
)
def test_bad_flags_are_one_line_and_write_nothing(searched, capsys, flags, message):
    root, url = searched
    names = sorted(s.study_name for s in optuna.get_all_study_summaries(url))
    assert _exit([*_ladder(url, "s", "--no-train"), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert sorted(s.study_name for s in optuna.get_all_study_summaries(url)) == names


@pytest.mark.parametrize("flag", [["--local"], ["--workers", "2"], ["--no-tensorboard"], ["--device", "cpu"]])
def test_resource_flags_with_no_train_are_refused_as_changing_nothing(searched, capsys, flag):
    """--no-train trains nothing: where runs would train was accepted silently."""
    root, url = searched
    if "s-ladder" not in {s.study_name for s in optuna.get_all_study_summaries(url)}:
        assert main(_ladder(url, "s", "--samples", "20", "--json")) == 0
    capsys.readouterr()
    assert _exit([*_ladder(url, "s", "--no-train"), *flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--no-train trains nothing, so it would change nothing; drop it" in err


def test_no_train_without_a_ladder_and_a_seconds_budget_are_refused(tmp_path, corpus_dir, capsys):
    url = _search(tmp_path, corpus_dir, "t", "budget: {seconds: 1}\n")
    assert _exit(_ladder(url, "t", "--no-train")) == 2
    assert "needs a steps, tokens or flops budget" in capsys.readouterr().err
    url = _search(tmp_path, corpus_dir, "u")
    # --top 5 of two architectures has a note to print, and --sizes 1,1.01,2 one: a refusal is still one
    # line (the notes used to come first)
    assert _exit(_ladder(url, "u", "--no-train", "--top", "5", "--sizes", "0.42,1,1.01,2")) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: --no-train: there is no ladder study 'u-ladder' yet") and err.count("\n") == 1
    )
    assert "u-ladder" not in {s.study_name for s in optuna.get_all_study_summaries(url)}


def test_a_ladder_of_too_many_runs_is_refused_before_its_runs_exist(searched, capsys):
    """--seeds 99999999 built every run (and the seeds' tuple) before counting them: killed for memory."""
    root, url = searched
    before = sorted((s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url))
    assert _exit(_ladder(url, "s", "--top", "5", "--seeds", "99999999")) == 2
    err = capsys.readouterr().err
    assert err == "error: --seeds 99999999: 1,199,999,988 runs; at most 10,000 in one ladder\n"
    assert sorted((s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url)) == before


def test_a_seed_count_per_size_that_does_not_match_the_sizes_is_one_line_before_anything(searched, capsys):
    root, url = searched
    before = sorted((s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url))
    assert _exit(_ladder(url, "s", "--sizes", "0.5,1,2,4", "--seeds", "2,2,1")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --seeds '2,2,1': give one count for every size") and err.count("\n") == 1
    assert "(4 here); got 3" in err
    assert sorted((s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url)) == before


def test_a_ladder_study_is_no_search_to_ladder_or_confirm(searched, capsys):
    root, url = searched
    if "s-ladder" not in {s.study_name for s in optuna.get_all_study_summaries(url)}:
        assert main(_ladder(url, "s", "--samples", "20", "--json")) == 0
        capsys.readouterr()
    # nor called a confirmation by the commands that refuse it, nor continued with search or confirm
    for command, said in (
        (["search", "--study", "s-ladder", "--storage", url, "--local"],
         "is the ladder of study 's' (made by `ladder`), not a search; continue it with `"),
        (["export", "--study", "s-ladder", "--storage", url, "--best", "--hf", str(root / "hf")],
         "is a ladder's runs, which keeps no weights"),
        (["export", "--study", "s-ladder", "--storage", url, "--confirmed", "--out", str(root / "w.yaml")],
         "is a ladder's runs; pass the search study 's'"),
    ):  # fmt: skip
        assert _exit(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and "confirmation" not in err and "confirm --" not in err
    for command in (
        _ladder(url, "s-ladder", "--no-train"),
        ["confirm", "--study", "s-ladder", "--storage", url],
    ):
        assert _exit(command) == 2
        # one line, naming it as what it is (it was called a confirmation, after a note on what it is)
        assert (
            capsys.readouterr().err
            == "error: --study 's-ladder' is a ladder's runs; pass the search study 's'\n"
        )


def test_a_larger_scale_makes_room_for_the_rungs_of_a_short_study(tmp_path, corpus_dir, capsys):
    """A study of 2 steps cannot place the ladder's rungs at 1x, but at --scale 8 every run has them: the
    ladder used to check the study's space at 1x with its rungs and refuse, blaming the study's spec."""
    url = _search(tmp_path, corpus_dir, "short", "budget: {steps: 2}\n")
    flags = ["--top", "1", "--sizes", "0.42,1,3.4", "--samples", "20"]
    assert _exit(_ladder(url, "short", *flags)) == 2
    assert "give a larger --scale" in capsys.readouterr().err
    assert main(_ladder(url, "short", *flags, "--scale", "8")) == 0
    ladder = optuna.load_study(study_name="short-ladder", storage=url)
    done = [t for t in ladder.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 6 and {t.user_attrs["steps"] for t in done} >= {16}
    # --no-train reports the study's runs: the plan flags' defaults (--scale 1) are not checked again
    # against the study (it refused "give a larger --scale" though it trains nothing)
    capsys.readouterr()
    assert main(_ladder(url, "short", "--top", "1", "--sizes", "0.42,1,3.4", "--samples", "20", "--no-train",
                        "--check", "none")) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert "give a larger --scale" not in captured.err and "ladder: " in captured.out


def test_check_on_too_few_sizes_is_refused_before_training(searched, capsys):
    """`--check` with 3 sizes trained every run and then printed no check at all, saying nothing."""
    root, url = searched
    before = sorted((s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url))
    assert _exit([*_ladder(url, "s"), "--sizes", "0.42,1,3.4", "--check"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: --check holds out the larger sizes and fits the others, which needs 4 distinct sizes or "
        "more; --sizes 0.42,1,3.4 gives 3 (0.42, 1, 3.4): add a size\n"
    )
    assert sorted((s.study_name, s.n_trials) for s in optuna.get_all_study_summaries(url)) == before


# the two below run last: they add a size to the module's ladder (the tests above report on its four)
FIVE = "0.125,0.42,1,2,3.4"


def test_a_shared_floor_and_a_rollout_check_end_to_end(searched, capsys):
    """--share E --check rollout: one E for both architectures, the free parameters against the points,
    every fit of the smallest k sizes predicting every larger size, with coverage and the orders that
    cost no fit, a verdict at the top of the report and on the console, and what each size is."""
    root, url = searched
    report = root / "rollout.md"
    argv = [*_ladder(url, "s", "--share", "E", "--check", "rollout", "--json", "--samples", "20")]
    argv[argv.index("--sizes") + 1] = FIVE
    assert main([*argv, "--report", str(report)]) == 0
    io = capsys.readouterr()
    out = json.loads(io.out)
    assert len({f["fit"]["E"] for f in out["families"]}) == 1  # one floor, fitted jointly
    assert {f["fit"]["share"] for f in out["families"]} == {"E"}
    assert out["fit"] == {
        "share": "E",
        "shared": {"E": out["families"][0]["fit"]["E"]},
        "architectures": 2,
        "free_parameters": 1 + 2 * 4,
        "points": 2 * 5 * 3,
        "runs": 2 * 5,
    }
    check = out["check"]
    assert out["check_kind"] == "rollout"
    folds = [(f["fitted_sizes"], f["held_out_size"]) for f in check["folds"]]
    assert folds == [([0.125, 0.42, 1.0], 2.0), ([0.125, 0.42, 1.0], 3.4), ([0.125, 0.42, 1.0, 2.0], 3.4)]
    assert check["folds"][1]["beyond"]["params"] > check["folds"][0]["beyond"]["params"] > 1
    # three sizes of one seed give no interval; four do: the coverage counts the points that have one
    assert [f["coverage"]["points"] for f in check["folds"]] == [0, 0, 2 * 3]
    assert check["coverage"]["points"] == 6 and 0 <= check["coverage"]["inside"] <= 6
    for f in check["folds"]:
        for r in f["rows"]:
            assert r["by"]["largest fitted size"] is not None and r["by"]["size 1"] is not None
    assert set(check["mean_spearman"]) >= {"fit", "largest fitted size", "size 1"}
    verdict = out["verdict"]
    assert verdict["check"] == "rollout" and verdict["status"] in ("supported", "not supported")
    assert all(f["prediction"]["verdict"] == verdict["status"] for f in out["families"])
    assert "ladder: prediction " in io.err  # the console line (stderr under --json)
    assert "size 0.125 is d16 h2 L1: [mdha(k3) squared_relux2]" in io.err  # what each size is
    text = report.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert "prediction" in lines[2].lower() and "rollout check" in lines[2]
    assert "## Rollout: fitted on the smallest sizes" in text and "of the held-out losses" in text
    assert "9 free parameters against 30 points (10 runs, 2 architectures; --share E: shared by all" in text
    assert "| vanilla (d32 h4 L2 T16) | 0.125 | `d16 h2 L1: [mha relux4]` |" in text


def test_a_ladder_whose_check_fails_says_so_at_the_top_and_marks_p_best(searched, capsys, monkeypatch):
    """A ladder built to fail its check (its held-out fits predict 0.5 nats too high): the report and the
    console say the prediction is not supported, before anything else, and p(best) carries the mark."""
    import nas.ladder.check as check_module

    real = check_module._families

    def off(*args, **kwargs):
        fams = real(*args, **kwargs)
        for f in fams:
            if f.fit is not None:
                f.fit = dataclasses.replace(f.fit, E=f.fit.E + 0.5)
                f.draws = [dataclasses.replace(d, E=d.E + 0.5) for d in f.draws]
        return fams

    monkeypatch.setattr(check_module, "_families", off)
    root, url = searched
    report = root / "failed.md"
    argv = _ladder(url, "s", "--no-train", "--check", "rollout", "--samples", "20", "--report", str(report))
    argv[argv.index("--sizes") + 1] = FIVE
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "ladder: prediction NOT SUPPORTED by this ladder (rollout check): the 5-95% intervals cover 0 of 6"
        in out
    )
    lines = report.read_text(encoding="utf-8").splitlines()
    assert lines[2].startswith("**Prediction NOT SUPPORTED by this ladder (rollout check)")
    rows = [line for line in lines if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and all("(not supported)" in row for row in rows)
    assert main([*argv[:-2], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"]["status"] == "not supported"
    assert all(f["prediction"]["verdict"] == "not supported" for f in data["families"])
