"""Pictures of a study as PNG files (matplotlib's Agg canvas: no display, no network).

``plot_study`` writes three: loss against FLOPs/token with the Pareto front,
which attention block (and activation) the best trials use at each layer, and
the loss of every trial in order with the running best.
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from optuna.trial import FrozenTrial, TrialState

from evaluators.result import Measure
from nas.errors import UserError
from nas.files.outputs import Planned, plan_output, write_output
from nas.plural import plural
from nas.search.reports.layers import layer_choices, slot_name, top_trials
from nas.search.storage.records import is_infeasible, measure_of

FILES = ("pareto.png", "blocks_by_layer.png", "history.png")


def _loss(t: FrozenTrial) -> float | None:
    """Final loss of a COMPLETE trial; loss when stopped for a PRUNED one; None without one."""
    if t.state == TrialState.COMPLETE and t.values:
        return float(t.values[0])
    value = t.user_attrs.get("val_loss")
    return float(value) if isinstance(value, (int, float)) else None


def _ylabel(m: Measure) -> str:
    """The value axis: a language model's loss in its units, else the evaluator's own value by name."""
    return "validation loss (nats/token)" if m.lm else f"{m.name}, {m.better} is best"


def _shown(m: Measure, points: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``points`` (x, recorded value, ...) with the value as it is reported (a probe score, not 1 - it)."""
    return [(p[0], m.shown(p[1]), *p[2:]) for p in points]


def pareto_front(points: Sequence[tuple[float, float, Any]]) -> list[tuple[float, float, Any]]:
    """Non-dominated points of (cost, loss, tag), both minimised, by increasing cost."""
    front: list[tuple[float, float, Any]] = []
    for p in sorted(points, key=lambda p: (p[0], p[1])):
        if not front or p[1] < front[-1][1]:
            front.append(p)
    return front


def _xy(points: Sequence[tuple[Any, ...]]) -> tuple[list[Any], list[Any]]:
    return [p[0] for p in points], [p[1] for p in points]


def _cost_loss(trials: Sequence[FrozenTrial]) -> list[tuple[float, float, int]]:
    """(forward FLOPs/token, loss, number) of the trials that have both."""
    out = []
    for t in trials:
        cost, loss = t.user_attrs.get("flops_per_token"), _loss(t)
        if cost is not None and loss is not None:
            out.append((float(cost), loss, t.number))
    return out


def _save(fig: Figure, target: Planned | str | os.PathLike[str]) -> Path:
    FigureCanvasAgg(fig)
    return write_output(target, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))


def _trials(study: optuna.Study, state: TrialState) -> list[FrozenTrial]:
    # A candidate over the caps is COMPLETE for the sampler's sake but has no result to plot.
    return [t for t in study.get_trials(deepcopy=False, states=(state,)) if not is_infeasible(t)]


#: where a Pareto point's label may go (offset in points from the point): the one farthest from every
#: other point drawn is taken, so a label never sits on another trial's point when it need not
_LABEL_OFFSETS = ((4, 4), (4, -11), (-16, 4), (-16, -11), (6, -3), (-20, -3))


def _label_front(fig: Figure, ax: Any, front: Sequence[tuple[float, float, int]],
                 points: Sequence[tuple[float, float]]) -> None:  # fmt: skip
    """Write ``#N`` beside each front point, on the side farthest from the other points."""
    import numpy as np

    FigureCanvasAgg(fig).draw()  # settle the layout, so data -> pixel transforms are the final ones
    pixels = ax.transData.transform(np.asarray(points, dtype=float)) if points else np.zeros((0, 2))
    per_point = fig.dpi / 72
    for x, y, n in front:
        at = ax.transData.transform((x, y))
        others = pixels[np.hypot(*(pixels - at).T) > 0.5] if len(pixels) else pixels

        def clearance(offset: tuple[int, int], at: Any = at, others: Any = others) -> float:
            centre = at + np.array([offset[0] + 6, offset[1] + 3]) * per_point  # about the label's middle
            return float(np.hypot(*(others - centre).T).min()) if len(others) else 0.0

        best = max(_LABEL_OFFSETS, key=clearance)
        ax.annotate(f"#{n}", (x, y), textcoords="offset points", xytext=best, fontsize=8)


def plot_pareto(study: optuna.Study, path: Planned | str | os.PathLike[str]) -> Path:
    """Validation loss against forward FLOPs/token; the front is a step line through its trials.

    A study whose objectives include the inference state (``loss+flops+state``) gets a second panel,
    loss against state bytes, with the three-way front (Optuna's ``best_trials``) marked in both.
    """
    if "state_bytes" in (study.metric_names or ()):
        return _plot_three_way(study, path)
    m = measure_of(study)
    fig = Figure(figsize=(7.5, 5), layout="constrained")
    ax = fig.add_subplot()
    done = _cost_loss(_trials(study, TrialState.COMPLETE))
    pruned = _shown(m, _cost_loss(_trials(study, TrialState.PRUNED)))
    value = "loss" if m.lm else m.column
    if pruned:
        ax.scatter(
            *_xy(pruned), s=14, color="0.6", alpha=0.35, label=f"pruned, {value} when stopped ({len(pruned)})"
        )
    if done:
        front = _shown(m, pareto_front(done))  # of the recorded values, both minimised
        done = _shown(m, done)
        ax.scatter(
            [p[0] for p in done],
            [p[1] for p in done],
            s=22,
            color="tab:blue",
            alpha=0.8,
            label=f"complete ({len(done)})",
        )
        ax.step([p[0] for p in front], [p[1] for p in front], where="post", color="tab:red", lw=1.5)
        ax.scatter(
            [p[0] for p in front],
            [p[1] for p in front],
            s=46,
            color="tab:red",
            zorder=3,
            label=f"Pareto front ({len(front)})",
        )
        xs = [p[0] for p in done] + [p[0] for p in pruned]
        if min(xs) > 0 and max(xs) / min(xs) > 10:
            ax.set_xscale("log")
        _label_front(fig, ax, front, [(p[0], p[1]) for p in done + pruned])
    ax.set_xlabel("forward FLOPs per token")
    ax.set_ylabel(_ylabel(m))
    ax.set_title(f"{study.study_name}: {value} vs compute")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


def _plot_three_way(study: optuna.Study, path: Planned | str | os.PathLike[str]) -> Path:
    m = measure_of(study)
    fig = Figure(figsize=(12, 5), layout="constrained")
    done = [t for t in _trials(study, TrialState.COMPLETE) if _loss(t) is not None]
    front = {t.number for t in study.best_trials if not is_infeasible(t)} if done else set()
    for i, (key, label) in enumerate(
        (
            ("flops_per_token", "forward FLOPs per token"),
            ("state_bytes", "state bytes per sequence while generating"),
        )
    ):
        ax = fig.add_subplot(1, 2, i + 1)
        pts = [
            (float(t.user_attrs[key]), m.shown(_loss(t)), t.number)  # type: ignore[arg-type]
            for t in done
            if t.user_attrs.get(key) is not None
        ]
        rest = [p for p in pts if p[2] not in front]
        best = [p for p in pts if p[2] in front]
        if rest:
            ax.scatter(
                *_xy(rest), s=22, color="tab:blue", alpha=0.8, label=f"complete, dominated ({len(rest)})"
            )
        if best:
            ax.scatter(*_xy(best), s=46, color="tab:red", zorder=3, label=f"3-way Pareto front ({len(best)})")
            for x, y, n in best:
                ax.annotate(f"#{n}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        xs = [p[0] for p in pts]
        if xs and min(xs) > 0 and max(xs) / min(xs) > 10:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(_ylabel(m))
        ax.grid(alpha=0.3)
        if pts:
            ax.legend(loc="best", fontsize=8)
    fig.suptitle(f"{study.study_name}: {'loss' if m.lm else m.column} vs compute and inference state")
    return _save(fig, path)


def _colour(name: str) -> Any:
    """A block's colour, the same in every study and every figure: from its name alone, so that the
    read side need not import the block registry (torch)."""
    import matplotlib

    return matplotlib.colormaps["tab20"](zlib.crc32(name.encode()) % 20)


def _stacked(ax: Any, counts: list[Counter[str]], labels: list[str], title: str) -> None:
    """One bar per layer, stacked by name; a name keeps its colour across studies (:func:`_colour`)."""
    names = sorted({n for c in counts for n in c})
    xs = list(range(len(counts)))
    bottom = [0] * len(counts)
    for name in names:
        heights = [c.get(name, 0) for c in counts]
        ax.bar(xs, heights, bottom=bottom, color=_colour(name), label=name, width=0.7)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xticks(xs, labels)
    ax.set_xlabel("layer")
    ax.set_ylabel("trials")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_blocks(study: optuna.Study, path: Planned | str | os.PathLike[str], top: int = 10) -> Path:
    """How often each attention block and FFN activation appears at each layer among the top trials
    (a seq2seq study: the encoder's layers, then the decoder's)."""
    ranked = top_trials(study, top)
    # depths that vary: layers counted from the top (-1 the last), where a pinned last layer lines up
    depths = {len(t.user_attrs["arch"].get("layers") or []) for t in ranked}
    top_down = len(depths) > 1
    slots = sorted({slot for t in ranked for slot, _, _ in layer_choices(t, from_top=top_down)})
    att: dict[tuple[int, int], Counter[str]] = {slot: Counter() for slot in slots}
    act: dict[tuple[int, int], Counter[str]] = {slot: Counter() for slot in slots}
    for t in ranked:
        for slot, a, f in layer_choices(t, from_top=top_down):
            att[slot][a] += 1
            act[slot][f] += 1
    labels = [slot_name(slot, any(stack == 0 for stack, _ in slots)) for slot in slots]
    fig = Figure(figsize=(8 + 0.3 * max(0, len(slots) - 8), 6.5), layout="constrained")
    ax1, ax2 = fig.subplots(2, 1)
    m = measure_of(study)
    title = (
        f"attention block by layer among the top {plural(len(ranked), 'trial')} "
        f"by {'loss' if m.lm else m.column}"
        + ("\n(layers counted from the top: -1 is the last)" if top_down else "")
    )
    _stacked(ax1, [att[s] for s in slots], labels, title)
    activations = [act[s] for s in slots]
    _stacked(ax2, activations, labels, "FFN activation by layer, same trials")
    fig.suptitle(study.study_name)
    return _save(fig, path)


def plot_history(study: optuna.Study, path: Planned | str | os.PathLike[str]) -> Path:
    """Loss of each trial by trial number, with the running best of the COMPLETE ones."""
    m = measure_of(study)
    value = "loss" if m.lm else m.column
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    done = [(t.number, _loss(t)) for t in _trials(study, TrialState.COMPLETE) if _loss(t) is not None]
    pruned = _shown(
        m, [(t.number, _loss(t)) for t in _trials(study, TrialState.PRUNED) if _loss(t) is not None]
    )
    failed = [t.number for t in _trials(study, TrialState.FAIL)]
    if pruned:
        ax.scatter(
            *_xy(pruned),
            s=14,
            marker="x",
            color="0.6",
            alpha=0.5,
            label=f"pruned, {value} when stopped ({len(pruned)})",
        )
    if done:
        done.sort()
        ax.scatter(*_xy(_shown(m, done)), s=20, color="tab:blue", label=f"complete ({len(done)})")
        best, run = float("inf"), []
        for n, loss in done:  # the recorded values, minimised
            best = min(best, loss)
            run.append((n, best))
        last = max(t.number for t in study.get_trials(deepcopy=False))
        run.append((last, best))
        ax.step(*_xy(_shown(m, run)), where="post", color="tab:red", lw=1.5,
                label=f"best so far ({m.shown(best):.4f})")  # fmt: skip
    if failed:
        ax.plot(
            failed,
            [0.0] * len(failed),
            "|",
            transform=ax.get_xaxis_transform(),
            color="tab:orange",
            ms=12,
            label=f"failed ({len(failed)})",
        )
    ax.set_xlabel("trial")
    ax.set_ylabel(_ylabel(m))
    ax.set_title(f"{study.study_name}: optimization history")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plan_plots(out_dir: str | os.PathLike[str], force: bool = False) -> list[Planned]:
    """The three files ``plot_study`` writes into ``out_dir``, checked under nas.files.outputs' rule
    (creates nothing)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out_dir)!r}: exists and is not a directory")
    return [plan_output(out / name, "--out", force=force, example=None) for name in FILES]


def plot_study(study: optuna.Study, targets: Sequence[Planned], top: int = 10) -> list[Path]:
    """Write the three plots (``targets``: :func:`plan_plots`); returns their paths."""
    if not _trials(study, TrialState.COMPLETE):
        counts = Counter(t.state.name for t in study.get_trials(deepcopy=False))
        have = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no trials"
        raise UserError(f"--study {study.study_name!r} has no COMPLETE trial to plot yet ({have})")
    return [
        plot_pareto(study, targets[0]),
        plot_blocks(study, targets[1], top),
        plot_history(study, targets[2]),
    ]
