"""The confirm report's two figures: one colour per architecture in both, a readable compute axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_hex

import nas.confirm.markdown as markdown
from nas.files.outputs import plan_output


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
    labels = [t.get_text() for t in dax.get_xticklabels()]
    points = [to_hex(c.lines[0].get_color()) for c in dax.containers]
    assert labels == ["trial 3 1x", "primer_ez 1x"]
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


def test_many_runs_get_few_tick_labels_and_both_figures_a_title(tmp_path: Path, figures: list[Any]) -> None:
    """Every measured compute was a tick label: five architectures at three scales printed over each other;
    neither figure had a title."""
    rows = []
    for i, name in enumerate(["vanilla", "trial 3", "trial 7", "transformer_pp", "primer_ez"]):
        for scale in (0.5, 1.0, 2.0):
            row = _row(
                name, "baseline" if i != 1 else "finalist", 3e12 * scale * (1 + 0.05 * i), 2.0, 0.01 * i
            )
            rows.append({**row, "scale": scale})
    targets = [plan_output(tmp_path / f"c_{k}.png", "--report", example=None) for k in ("compute", "deltas")]
    markdown.plot({"study": "demo", "summary": rows}, ["vanilla"], targets)
    compute, deltas = figures
    ticks = [t for t in compute.axes[0].get_xticklabels() if t.get_text()]
    assert 2 <= len(ticks) <= 7  # 15 distinct computes
    assert compute.axes[0].get_title().startswith("demo: ") and "vanilla" in deltas.axes[0].get_title()


def test_spaced_keeps_the_ends_and_drops_what_crowds() -> None:
    values = [1.0, 1.01, 1.02, 1.5, 2.0, 2.02, 3.0, 4.0, 4.01]
    kept = markdown.spaced(values, most=4)
    assert kept[0] == 1.0 and kept[-1] == 4.01 and len(kept) <= 5
    assert all(b / a >= (4.01 / 1.0) ** (1 / 4) for a, b in zip(kept, kept[1:], strict=False))
