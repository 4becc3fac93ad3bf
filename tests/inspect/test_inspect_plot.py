"""``plot``: three non-empty PNG files, and the Pareto front it draws."""

from __future__ import annotations

from pathlib import Path

import optuna

from nas.search.reports.plots import FILES, pareto_front

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_writes_three_pngs(cli, multi: optuna.Study, runs, tmp_path: Path) -> None:
    out_dir = tmp_path / "plots" / "multi"
    rc, out, err = cli("plot", "--study", "multi", "--runs-dir", runs, "--out", out_dir, "--top", "5")
    assert rc == 0, err
    written = [Path(line) for line in out.splitlines()]
    assert written == [out_dir / name for name in FILES]
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, path


def test_single_objective_study_plots_too(cli, single: optuna.Study, runs, tmp_path: Path) -> None:
    rc, out, _ = cli("plot", "--study", "single", "--runs-dir", runs, "--out", tmp_path / "p")
    assert rc == 0 and len(out.splitlines()) == 3


def test_pareto_front_points() -> None:
    pts = [
        (3.0, 1.0, "a"),
        (1.0, 3.0, "b"),
        (2.0, 2.5, "c"),
        (2.0, 2.0, "d"),
        (4.0, 1.5, "e"),
        (1.0, 3.5, "f"),
    ]
    assert [p[2] for p in pareto_front(pts)] == ["b", "d", "a"]


def test_a_probe_studys_plots_draw_its_score_under_its_name(runs, monkeypatch, tmp_path: Path) -> None:
    """The plots of a probes study drew 1 - score on an axis of "validation loss (nats/token)"."""
    from inspect_studies import add_trial, make_study

    import nas.search.reports.plots

    study = make_study(runs, "probes")
    study.set_user_attr("settings", {**study.user_attrs["settings"], "evaluator": "probes@5"})
    add_trial(study, "vanilla", 0.75)
    add_trial(study, "small", 0.9)
    figures = []
    monkeypatch.setattr(
        nas.search.reports.plots, "_save", lambda fig, path: figures.append(fig) or Path(path)
    )
    nas.search.reports.plots.plot_pareto(study, tmp_path / "p.png")
    nas.search.reports.plots.plot_history(study, tmp_path / "h.png")
    nas.search.reports.plots.plot_blocks(study, tmp_path / "b.png")
    pareto, history, blocks = (f.axes[0] for f in figures)
    for ax in (pareto, history):
        assert ax.get_ylabel() == "probe score (mean accuracy), highest is best"
    assert {round(float(y), 6) for c in pareto.collections for _, y in c.get_offsets()} == {0.1, 0.25}
    assert "best so far (0.2500)" in [t.get_text() for t in history.get_legend().get_texts()]
    assert pareto.get_title() == "probes: score vs compute" and "by score" in blocks.get_title()
