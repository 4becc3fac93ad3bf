"""The progress line: the time left weighs each trial by its cost, and "best" is the study's."""

from __future__ import annotations

import io

import pytest

from nas.search.driver.console import Reporter


def _reporter(queued: list[float], running: list[tuple[float, float]], total: int) -> Reporter:
    return Reporter(total, io.StringIO(), pending=lambda: (list(queued), list(running)))


def test_long_runs_queued_last_are_counted_at_their_cost():
    # a confirmation: four runs at 1x took 10 s each; four runs at 4x are still queued
    queued = [4.0] * 4
    r = _reporter(queued, [], total=8)
    for n in range(4):
        r.finished(n + 1, 0, n, "COMPLETE", "", 10.0, workers=1, loss=3.0, work=1.0)
    assert r.time_left(4, workers=1) == pytest.approx(160.0)  # the mean trial x count would say 40 s
    assert "~2m40s left" in r.out.getvalue().splitlines()[-1]


def test_running_trials_count_what_they_have_left_and_few_trials_use_few_workers():
    r = _reporter([], [(1.0, 4.0)], total=2)  # one trial left, running for 4 s already
    r.finished(1, 1, 0, "COMPLETE", "", 10.0, workers=4, loss=3.0)
    # 10 s per trial, 4 s of it spent; four workers do not share one trial
    assert r.time_left(1, workers=4) == pytest.approx(6.0)


def test_without_pending_the_mean_trial_is_used():
    r = Reporter(5, io.StringIO())
    r.finished(1, 0, 0, "COMPLETE", "", 20.0, workers=2, loss=3.0)
    r.finished(2, 0, 1, "PRUNED", "", 10.0, workers=2)
    assert r.time_left(3, workers=2) == pytest.approx(15.0 * 3 / 2)
    assert r.time_left(0, workers=2) is None  # nothing left: no estimate printed


def test_best_is_the_studys_not_this_runs():
    r = Reporter(3, io.StringIO())
    r.seen(2.5)  # an earlier run of the study reached 2.5
    r.seen(float("nan"))  # never a NaN as best
    r.finished(1, 0, 7, "COMPLETE", "", 1.0, workers=1, loss=3.1)
    assert "best 2.5000" in r.out.getvalue()


def test_a_continued_searchs_line_counts_the_whole_study_as_its_position_does(tmp_path, text_corpus, capsys):
    # The second run's line read '[2/2] trial 1 ... 1 done 0 pruned 0 failed': the position counted the
    # study, the states this run only.
    import re
    from pathlib import Path

    from nas.cli import main

    space = Path(__file__).with_name("tiny_space.yaml")
    args = ["search", "--space", str(space), "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
            "--runs-dir", str(tmp_path / "runs"), "--data", str(text_corpus), "--local", "--no-tensorboard",
            "--steps", "2", "--hurdles", "0.5"]  # fmt: skip
    assert main([*args, "--trials", "1"]) == 0
    capsys.readouterr()
    assert main([*args, "--trials", "2"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert len(lines) == 1, lines
    m = re.search(r"^\[\s*(\d+)/2\] .* (\d+) done (\d+) pruned (\d+) failed(?: (\d+) over cap)?,", lines[0])
    assert m is not None, lines[0]
    position, *counts = (int(g or 0) for g in m.groups())
    assert position == 2 and sum(counts) == 2, lines[0]
