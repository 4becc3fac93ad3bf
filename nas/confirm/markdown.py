"""The confirmation as text: Markdown tables (printed, or written with ``--report``) and two plots."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from evaluators.result import measure_of
from nas.files.outputs import Planned, write_output

#: how every report starts: ``confirm --report FILE`` overwrites only a file that starts so
REPORT_HEAD = "# Confirmation of study "


def _f(v: float | None, digits: int = 4, sign: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def _delta(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    rng = f"[{_f(d['min'], sign=True)}, {_f(d['max'], sign=True)}]"
    return f"{_f(d['mean'], sign=True)} {rng}; lower on {d['lower_on']}/{d['n']}"


def summary_tables(report: dict[str, Any], baselines: Sequence[str]) -> list[str]:
    """One table per scale: spread over seeds and the paired delta to each baseline."""
    lines = []
    for scale in report["scales"]:
        lines += [f"### {scale:g}x the search's budget", ""]
        head = ["architecture", "role", "lr", "seeds", "val loss mean ± sd", "[min, max]"]
        head += [f"Δ vs {b} by seed: mean [min, max]" for b in baselines]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for r in report["summary"]:
            if r["scale"] != scale:
                continue
            seeds = f"{r['n']}" + (f" ({r['failed']} failed)" if r["failed"] else "")
            cells = [
                f"{r['name']} (`{r['arch_id']}`)",
                r["role"],
                f"{r['lr']:g}" if r["lr"] else "-",
                seeds,
                f"{_f(r['mean'])} ± {_f(r['std'])}",
                f"[{_f(r['min'])}, {_f(r['max'])}]",
            ]
            cells += [_delta(r["delta_vs_baseline"].get(b)) for b in baselines]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", *cost_table([r for r in report["summary"] if r["scale"] == scale])]
    return lines


def _si(v: float | None, unit: str = "") -> str:
    """``1.90M``, ``846k``: three significant figures with a k/M/G suffix (``-`` when unknown)."""
    if v is None:
        return "-"
    # 0.9995: what rounds up to 1.00 of a unit is shown in it (999.9 -> 1.00k, not 1.00e+03)
    div, suffix = next(
        ((d, s) for d, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")) if abs(v) >= d * 0.9995), (1, "")
    )
    return f"{v / div:#.3g}".rstrip(".") + suffix + unit  # '#' keeps 1.90's zero; rstrip drops 846.'s dot


def cost_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Bits per byte and what each architecture costs: size, FLOPs per token, steps and speed (means)."""
    lines = [
        "| architecture | bits/byte mean ± sd | params | FLOPs/token (fwd) | steps | tokens/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        bpb = "-" if r["bpb_mean"] is None else f"{_f(r['bpb_mean'])} ± {_f(r['bpb_std'])}"
        steps = "-" if r["steps"] is None else f"{r['steps']:.0f}"
        cells = [r["name"], bpb, _si(r["params"]), _si(r["flops_per_token"]), steps, _si(r["tokens_per_s"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def curse_table(report: dict[str, Any]) -> list[str]:
    """The search's single-seed score against the confirmed mean at the same budget."""
    rows = [r for r in report["summary"] if r["scale"] == 1 and r["search_loss"] is not None]
    if not rows:
        return []
    lines = [
        "## The search's score against the confirmed mean (1x)",
        "",
        f"| architecture | search trial | {_search_column(report)} | confirmed mean | gap |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    shown = measure_of(report.get("search_evaluator")).shown  # a probe score as the score, not 1 - it
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['search_trial']} | {_f(shown(r['search_loss']))} | {_f(r['mean'])} | "
            f"{_f(r['search_gap'], sign=True)} |"
        )
    return lines + [""]


def _search_column(report: dict[str, Any]) -> str:
    """What the search measured: its loss, or the value of its evaluator (a probe score, a proxy)."""
    measure = measure_of(report.get("search_evaluator"))
    return "search loss" if measure.lm else f"search {measure.name} ({measure.evaluator})"


def _corr_cells(c: dict[str, Any]) -> str:
    return f"{_f(c['spearman'], 3)} | {_f(c['kendall'], 3)} | {c['n']}"


def rank_table(rc: dict[str, Any]) -> list[str]:
    lines = [
        "## Rank stability",
        "",
        "| compared | Spearman | Kendall | architectures |",
        "| --- | ---: | ---: | ---: |",
    ]
    for scale, c in rc["search_vs_confirmed"].items():
        lines.append(f"| search vs confirmed at {scale} | {_corr_cells(c)} |")
    for pair, c in rc["between_scales"].items():
        lines.append(f"| confirmed {pair} | {_corr_cells(c)} |")
    return lines + ["", "(- : fewer than two architectures, or one of the rankings is all ties)", ""]


def power_lines(pl: dict[str, Any] | None) -> list[str]:
    if not pl:
        return []
    lines = [
        "## Loss against training compute",
        "",
        f"Model: {pl['model']}.",
        "",
        "| architecture | a | b |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {k} | {f['a']:.4g} | {f['b']:.4f} |" for k, f in pl["fits"].items()]
    lines.append("")
    for c in pl["crossings"]:
        if c["compute"] is None:
            lines.append(f"- {c['finalist']} and {c['baseline']}: parallel fits, no crossing")
        else:
            where = "inside" if c["within_measured"] else "outside (extrapolated)"
            lines.append(
                f"- {c['finalist']} and {c['baseline']} cross at {c['compute']:.3g} FLOPs, {where} "
                "the measured range"
            )
    return lines + [""]


def render(report: dict[str, Any], baselines: Sequence[str], images: Sequence[str] = ()) -> str:
    """The whole report as Markdown (``images``: plot file names to link)."""
    lines = [
        f"{REPORT_HEAD}{report['study']!r}",
        "",
        f"Runs in study `{report['confirm_study']}` ({report['storage']}); each architecture trained at "
        f"scales {', '.join(f'{s:g}x' for s in report['scales'])} of the search's budget "
        f"({report['budget']}) "
        f"with seeds {', '.join(map(str, report['seeds']))}"
        + (
            f", after an lr sweep over {', '.join(f'{x:g}' for x in report['lrs'])} "
            f"at seed {report['seeds'][0]}"
            if report["lrs"]
            else ""
        )
        + ". Seeds are paired: the same seed gives every architecture the same initialisation stream and "
        "batch order, so the Δ columns subtract the baseline's loss at the same seed.",
        "",
        "## Verdicts",
        "",
    ]
    lines += [f"- **{name}**: {text}" for name, text in report["verdicts"].items()] or ["(no finalist)"]
    if not report["baselines"]:
        lines += ["", "No baseline was measured: pass --baseline FILE to compare with one."]
    lines += ["", "## Validation loss over seeds", ""]
    lines += summary_tables(report, baselines)
    lines += curse_table(report) + rank_table(report["rank_correlation"]) + power_lines(report["power_law"])
    lines += [f"![{Path(p).stem}]({p})" for p in images]
    return "\n".join(lines).rstrip() + "\n"


def _save(fig: Figure, target: Planned) -> Path:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    return write_output(target, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))


def spaced(values: Sequence[float], most: int = 6, log: bool = True) -> list[float]:
    """At most about ``most`` of the sorted ``values``, at least a ``1/most`` of their span apart (in log
    space on a log axis), the first and the last kept: tick labels that do not print over each other
    (every measured compute as a tick did, with a few architectures at a few scales)."""
    if len(values) <= 2:
        return list(values)
    f = (lambda v: math.log(v)) if log else (lambda v: v)
    gap = (f(values[-1]) - f(values[0])) / most
    kept = [values[0]]
    for v in values[1:-1]:
        if f(v) - f(kept[-1]) >= gap and f(values[-1]) - f(v) >= gap:
            kept.append(v)
    return [*kept, values[-1]]


def plot(report: dict[str, Any], baselines: Sequence[str], targets: Sequence[Planned]) -> list[Path]:
    """``targets``: where ``STEM_compute.png`` (loss vs training compute, min-max bars) and
    ``STEM_deltas.png`` (paired deltas) go (:func:`nas.commands._runs.plan_report`)."""
    out = []
    names = list(dict.fromkeys(r["name"] for r in report["summary"]))
    # one colour per architecture in both figures (the default cycle follows each figure's own order)
    colour = {name: f"C{i % 10}" for i, name in enumerate(names)}
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for name in names:
        pts = [
            r for r in report["summary"] if r["name"] == name and r["mean"] is not None and r["train_flops"]
        ]
        if not pts:
            continue
        xs, ys = [r["train_flops"] for r in pts], [r["mean"] for r in pts]
        err = [
            [y - r["min"] for y, r in zip(ys, pts, strict=True)],
            [r["max"] - y for y, r in zip(ys, pts, strict=True)],
        ]
        ax.errorbar(
            xs,
            ys,
            yerr=err,
            marker="o",
            capsize=3,
            label=name,
            color=colour[name],
            linestyle="--" if pts[0]["role"] == "baseline" else "-",
        )
    ax.set_xscale("log")
    xs_all = sorted(
        {r["train_flops"] for r in report["summary"] if r["mean"] is not None and r["train_flops"]}
    )
    if xs_all and xs_all[-1] < 1.5 * xs_all[0]:
        # one scale (equal compute but for a few steps' rounding): a log axis over a fraction of a
        # percent says nothing; a linear one with the values written does
        ax.set_xscale("linear")
    if xs_all and xs_all[-1] < 10 * xs_all[0]:  # under a decade: log minor labels overlap
        ax.xaxis.set_minor_formatter(NullFormatter())
        ticks = spaced(xs_all, log=ax.get_xscale() == "log")
        ax.set_xticks(ticks, [f"{x:.3g}" for x in ticks], rotation=30, ha="right", fontsize=7)
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss (mean over seeds, min-max bars)")
    ax.set_title(f"{report.get('study', '')}: validation loss vs training compute".lstrip(": "), fontsize=10)
    ax.legend(fontsize=8)
    out.append(_save(fig, targets[0]))
    if baselines:
        rows = [r for r in report["summary"] if baselines[0] in r["delta_vs_baseline"]]
        fig = Figure(figsize=(max(7.0, 1.0 + 0.8 * len(rows)), 4.5))  # room for every label
        ax = fig.add_subplot()
        labels = []
        for i, r in enumerate(rows):
            d = r["delta_vs_baseline"][baselines[0]]
            ax.errorbar(
                [i],
                [d["mean"]],
                yerr=[[d["mean"] - d["min"]], [d["max"] - d["mean"]]],
                marker="o",
                capsize=4,
                color=colour.get(r["name"]),
            )
            labels.append(f"{r['name']} {r['scale']:g}x")  # one line: slanted, two lines fall apart
        ax.axhline(0, color="grey", linewidth=1)
        # names such as synth_factorized_random are wider than a slot: slanted, they do not overlap
        ax.set_xticks(range(len(labels)), labels, fontsize=7, rotation=30, ha="right")
        ax.set_ylabel(f"loss minus {baselines[0]}'s, same seed (mean, min-max)")
        title = f"{report.get('study', '')}: each run against {baselines[0]}, trained with the same seed"
        ax.set_title(title.lstrip(": "), fontsize=10)
        out.append(_save(fig, targets[1]))
    return out
