"""The confirm report's two figures: one colour per architecture in both, a readable compute axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_hex

import nas.confirm.markdown as markdown
from nas.outputs import plan_output


def _row(name: str, role: str, flops: float, mean: float, delta: float | None) -> dict[str, Any]:
    d = {"mean": delta, "min": (delta or 0) - 0.01, "max": (delta or 0) + 0.01} if delta is not None else None
    return {"name": name, "role": role, "scale": 1.0, "train_flops": flops, "mean": mean, "min": mean - 0.02,
            "max": mean + 0.02, "delta_vs_baseline": {"vanilla": d} if d else {}}  # fmt: skip


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    saved: list[Any] = []

    def keep(fig: Any, target: Any) -> Path:
        saved.append(fig)
        return Path(str(target.path))

    monkeypatch.setattr(markdown, "_save", keep)
    return saved


def test_one_architecture_has_one_colour_in_both_figures_and_equal_compute_is_not_on_a_log_axis(
    tmp_path: Path, figures: list[Any]
) -> None:
    # the summary lists the baseline first; the deltas figure leaves it out (its own delta is 0)
    report = {"summary": [
        _row("vanilla", "baseline", 5.00e12, 2.20, None),
        _row("trial 3", "finalist", 5.01e12, 2.10, -0.10),
        _row("primer_ez", "baseline", 4.99e12, 2.15, -0.05),
    ]}  # fmt: skip
    targets = [plan_output(tmp_path / f"c_{k}.png", "--report", example=None) for k in ("compute", "deltas")]
    markdown.plot(report, ["vanilla"], targets)
    compute, deltas = figures
    ax = compute.axes[0]
    assert ax.get_xscale() == "linear"  # one scale: 0.4% apart, a log axis would say nothing
    by_name = {c.get_label(): to_hex(c.lines[0].get_color()) for c in ax.containers}
    dax = deltas.axes[0]
    labels = [t.get_text().split("\n")[0] for t in dax.get_xticklabels()]
    points = [to_hex(c.lines[0].get_color()) for c in dax.containers]
    assert labels == ["trial 3", "primer_ez"]
    assert points == [by_name["trial 3"], by_name["primer_ez"]]


def test_several_scales_keep_the_log_axis(tmp_path: Path, figures: list[Any]) -> None:
    report = {
        "summary": [
            _row("vanilla", "baseline", 5e12, 2.2, None),
            _row("vanilla", "baseline", 2e13, 1.9, None),
        ]
    }
    targets = [plan_output(tmp_path / f"c_{k}.png", "--report", example=None) for k in ("compute", "deltas")]
    markdown.plot(report, [], targets)
    assert figures[0].axes[0].get_xscale() == "log"
