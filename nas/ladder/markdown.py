"""A ladder's report as Markdown, and its plot (loss against training compute per architecture)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from nas.files.outputs import Planned, write_output
from nas.models.sizes import missed

HEAD = "# Ladder of study "


def _si(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _f(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _interval(r: dict[str, Any]) -> str:
    """``[low, high]``, or ``none`` where the bootstrap could give none (the report says why)."""
    return "none" if r["low"] is None else f"[{r['low']:.4f}, {r['high']:.4f}]"


def _beyond(b: dict[str, float], below: dict[str, float] | None = None) -> str:
    """How far a prediction reaches past what was trained, e.g. ``compute 12x, params 2.1x``, or under
    it (``compute 0.001x the smallest``); ``inside`` when it does neither."""
    parts = [f"{k} {v:.3g}x" for k, v in b.items() if v > 1.0001]
    parts += [f"{k} {v:.2g}x the smallest" for k, v in (below or {}).items() if v < 0.9999]
    return ", ".join(parts) if parts else "inside"


def _p_best(p: dict[str, Any]) -> str:
    """p(best), marked where the ladder's own check contradicts the prediction (never bare there)."""
    cell = _f(p["p_best"], 2)
    return (
        f"{cell} (not supported)" if p.get("verdict") == "not supported" and p["p_best"] is not None else cell
    )


def verdict_lines(report: dict[str, Any]) -> list[str]:
    """The verdict the report leads with, and what the fits themselves warn of."""
    from nas.ladder.check import line

    v = report.get("verdict")
    if not v:
        return []
    text = line(v)
    lines = [
        f"**{text[0].upper()}{text[1:]}.**"
        if v["status"] == "not supported"
        else f"{text[0].upper()}{text[1:]}."
    ]
    lines += [f"- {w}." for w in v["warnings"]]
    return lines + [""]


def prediction_table(report: dict[str, Any]) -> list[str]:
    t = report["target"]
    where = f"size {t['size']:g}" if t["size"] is not None else "the compute-optimal size of each fit"
    given = "" if t["given"] else " (no --target-flops: 10x the largest measured point)"
    lo, hi = (int(100 * x) for x in report["interval"])
    lines = [
        f"## Predicted at {_si(t['flops'])} training FLOPs{given}, at {where}",
        "",
        f"Interval: the {lo}th to {hi}th percentile over {report['samples']} bootstrap draws of each "
        "architecture's runs; p(best): the share of joint draws in which it is the lowest. "
        "'beyond': how far past the largest trained point (compute, parameters, tokens) the prediction "
        "reaches, or under the smallest.",
        "",
        "| rank | architecture | role | predicted loss | interval | p(best) | params | tokens | beyond |",
        "|---:|---|---|---:|---|---:|---:|---:|---|",
    ]
    fams = {f["name"]: f for f in report["families"]}
    for i, name in enumerate(report["ranking"], 1):
        f = fams[name]
        p = f["prediction"]
        lines.append(
            f"| {i} | {name} | {f['role']} | {p['loss']:.4f} | {_interval(p)} | "
            f"{_p_best(p)} | {_si(p['params'])} | {_si(p['tokens'])} | "
            f"{_beyond(p['beyond'], p.get('below'))} |"
        )
    for f in report["families"]:
        if f["fit"] is None:
            lines.append(f"\n{f['name']}: not fitted ({f['why_not']}).")
            continue
        if f.get("no_interval"):
            lines.append(f"\n{f['name']}: no interval and no p(best): {f['no_interval']}.")
        if t["size"] is not None and (note := missed(t["size"], f["prediction"]["size_reached"])):
            lines.append(f"\n{f['name']}: {note}; the prediction is at that member.")
        elif f["prediction"].get("edge"):
            lines.append(
                f"\n{f['name']}: its fitted loss still falls at the {f['prediction']['edge']} size searched "
                f"({_si(f['prediction']['params'])} parameters): the fit has no compute-optimal size there, "
                "and the prediction is at that edge."
            )
    return lines


def fit_table(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        f"## Fits: loss = E + A / N^alpha + B / D^beta ({report['form']}; Huber on log-loss, many starts)",
        "",
        *_free(report.get("fit")),
        "| architecture | runs | points | E | A | alpha | B | beta | rms (log) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in report["families"]:
        c = f["fit"]
        if c is None:
            lines.append(f"| {f['name']} | {f['runs']} | {f['points']} | - | - | - | - | - | - |")
            continue
        lines.append(
            f"| {f['name']} | {c['runs']} | {c['points']} | {c['E']:.4g} | {c['A']:.4g} | {c['alpha']:.3f} | "
            f"{c['B']:.4g} | {c['beta']:.3f} | {c['rms_log']:.4f} |"
        )
    return lines


def _free(summary: dict[str, Any] | None) -> list[str]:
    """The free parameters against the points, and what is shared (``--share``)."""
    if not summary or not summary["architectures"]:
        return []
    shared = ", ".join(f"{k} = {v:.4g}" for k, v in summary["shared"].items())
    how = f"shared by all: {shared}" if shared else "each architecture fitted alone"
    return [
        f"{summary['free_parameters']} free parameters against {summary['points']} points ({summary['runs']} "
        f"runs, {summary['architectures']} architectures; --share {summary['share']}: {how}).",
        "",
    ]


def size_lines(report: dict[str, Any]) -> list[str]:
    """What each size of each architecture is (its shape and layers): one curve is one layer pattern."""
    if not report.get("members"):
        return []
    lines = ["", "## Sizes: what each architecture is at each size", "", "| architecture | size | layers |"]
    lines.append("|---|---:|---|")
    lines += [f"| {m['family']} | {m['size']:g} | `{m['layers']}` |" for m in report["members"]]
    return lines


def crossover_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "## Crossovers (fitted, compute-optimal, between the smallest measured point and the target)",
        "",
    ]
    if not report["crossovers"]:
        return lines + ["None: no finalist's fitted curve crosses a baseline's in that range."]
    return lines + [
        f"- {c['finalist']} and {c['baseline']} cross near {c['compute']:.3g} FLOPs; "
        f"{c['lower_after']} is lower above it"
        for c in report["crossovers"]
    ]


def check_table(check: dict[str, Any] | None) -> list[str]:
    if check is None:
        return []
    lines = [
        "",
        f"## Held out: size {check['held_out_size']:g}, predicted from sizes "
        f"{', '.join(f'{s:g}' for s in check['fitted_sizes'])}",
        "",
        "| architecture | predicted | interval | measured | error | seed spread |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in check["rows"]:
        lines.append(
            f"| {r['family']} | {r['predicted']:.4f} | {_interval(r)} | "
            f"{r['measured']:.4f} | {r['error']:+.4f} | {_f(r['seed_spread'])} |"
        )
    lines += [f"\n{r['family']}: no interval: {r['no_interval']}." for r in check["rows"] if r["no_interval"]]
    lines += ["", _summary(check)]
    lines += ["", "| ranking by | Spearman | Kendall |", "|---|---:|---:|"]
    for key, v in check["rank_correlation"].items():
        cells = "- | -" if v is None else f"{_f(v['spearman'], 3)} | {_f(v['kendall'], 3)}"
        lines.append(f"| {key} | {cells} |")
    return lines


def _coverage(c: dict[str, Any]) -> str:
    if c["share"] is None:
        return "no intervals"
    return f"{c['inside']}/{c['points']} ({c['share']:.0%})"


def _summary(check: dict[str, Any]) -> str:
    """Mean error, seed spread and coverage of a check, in one sentence."""
    spread = check["mean_seed_spread"]
    return (
        f"Mean absolute error {check['mean_abs_error']:.4f}"
        + (f", mean seed-to-seed spread {spread:.4f}" if spread is not None else " (one seed: no spread)")
        + f"; the 5-95% intervals cover {_coverage(check['coverage'])} of the held-out losses "
        "(an honest interval covers about 90%)."
    )


def rollout_table(check: dict[str, Any]) -> list[str]:
    """``--check rollout``: one row per fit of the smallest k sizes and larger size it predicts."""
    cheap = [k for k in check["folds"][0]["rank_correlation"] if k != "fit"]
    lines = [
        "",
        "## Rollout: fitted on the smallest sizes, predicting every larger one",
        "",
        "Beyond: how far the held-out size is past the largest fitted one (parameters, compute), mean over "
        "architectures. Spearman / Kendall of each order against the measured end losses; the fit's, then "
        "those that cost no fit.",
        "",
        "| fitted sizes | held out | beyond (params) | beyond (compute) | mean abs error | seed spread | "
        "coverage | fit | " + " | ".join(cheap) + " |",
        "|---|---:|---:|---:|---:|---:|---|---|" + "---|" * len(cheap),
    ]

    def rho(v: dict[str, float] | None) -> str:
        return "-" if v is None else f"{v['spearman']:.2f} / {v['kendall']:.2f}"

    for f in check["folds"]:
        r = f["rank_correlation"]
        lines.append(
            f"| {', '.join(f'{s:g}' for s in f['fitted_sizes'])} | {f['held_out_size']:g} | "
            f"{f['beyond']['params']:.3g}x | {f['beyond']['compute']:.3g}x | {f['mean_abs_error']:.4f} | "
            f"{_f(f['mean_seed_spread'])} | {_coverage(f['coverage'])} | {rho(r['fit'])} | "
            + " | ".join(rho(r[k]) for k in cheap)
            + " |"
        )
    means = ", ".join(f"{k} {_f(v, 2)}" for k, v in check["mean_spearman"].items())
    return lines + ["", _summary(check), "", f"Mean Spearman over the rows: {means}."]


def render(report: dict[str, Any], images: Sequence[str] = ()) -> str:
    runs = report["runs"]
    lines = [f"{HEAD}{report['study']!r}", "", *verdict_lines(report)]
    lines += [
        f"Runs in study `{report['ladder_study']}`: sizes {', '.join(f'{s:g}' for s in report['sizes'])} "
        f"of each architecture (docs/ladder.md), seeds {', '.join(map(str, report['seeds']))}"
        + (f" ({report['fewer_seeds']})" if report.get("fewer_seeds") else "")
        + ", size 1 on "
        f"{report['scale']:g}x the search's budget and every size on "
        + ("the same tokens per parameter, " if report["tokens"] == "per-param" else "the same tokens, ")
        + f"under the `{report.get('parametrization', 'standard')}` parametrization "
        + "(docs/parametrization.md), "
        + "one wsd run per size and seed with its rungs. "
        + f"{runs['complete']} of {runs['planned']} runs finished.",
        "",
    ]
    lines += prediction_table(report) if report["ranking"] else ["No architecture could be fitted yet."]
    check = report["check"]
    rollout = check is not None and report.get("check_kind") == "rollout"
    lines += crossover_lines(report) + fit_table(report) + size_lines(report)
    lines += rollout_table(check) if rollout else check_table(check)
    lines += [""] + [f"![{Path(p).stem}]({p})" for p in images]
    return "\n".join(lines).rstrip() + "\n"


def plot(report: dict[str, Any], target: Planned) -> Path:
    """Loss against training FLOPs: measured points, each fit's compute-optimal curve and its band,
    the target marked."""
    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    colours = [f"C{i}" for i in range(10)]
    for i, f in enumerate(report["families"]):
        colour = colours[i % len(colours)]
        pts = f["measured"]
        ax.scatter([p["flops"] for p in pts], [p["loss"] for p in pts], s=12, color=colour, alpha=0.7)
        c = f["curve"]
        if c is not None:
            style = "--" if f["role"] == "baseline" else "-"
            ax.plot(c["flops"], c["loss"], style, color=colour, label=f["name"])
            if c["low"] is not None:
                ax.fill_between(c["flops"], c["low"], c["high"], color=colour, alpha=0.15)
        else:
            ax.plot([], [], "o", color=colour, label=f"{f['name']} (not fitted)")
        p = f["prediction"]
        if p is not None:
            t = report["target"]["flops"]
            # the point and its interval drawn apart: a percentile interval need not contain the fit's
            # own prediction (an errorbar's lengths would be negative), and there may be no interval
            ax.plot([t], [p["loss"]], "D", color=colour)
            if p["low"] is not None:
                ax.vlines(t, p["low"], p["high"], color=colour)
                ax.plot([t, t], [p["low"], p["high"]], "_", color=colour, markersize=8)
    if report["target"]["flops"]:
        ax.axvline(report["target"]["flops"], color="grey", linestyle=":", label="target")
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss")
    lo, hi = (int(100 * x) for x in report["interval"])
    ax.set_title(
        f"ladder of study {report['study']!r}\npoints: measured; lines: the fitted compute-optimal loss; "
        f"bands: its {lo}-{hi}% bootstrap interval; diamonds: the prediction at the target",
        fontsize=8,
    )
    ax.legend(fontsize=7)
    FigureCanvasAgg(fig)
    fig.tight_layout()
    return write_output(target, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
