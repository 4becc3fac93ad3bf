"""``plot``: three non-empty PNG files, and the Pareto front it draws."""

from __future__ import annotations

from pathlib import Path

import optuna

from nas.plots import FILES, pareto_front

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
