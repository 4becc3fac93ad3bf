"""One trial in full: what ``show`` prints (``format_trial``) and its ``--json`` (``trial_detail``)."""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from evaluators.result import (
    METRICS,  # the measured metrics a finished trial carries in its user attributes
    measure_of,
    perplexity,
    sample_lines,  # how a trial was run (CPU results depend on threads)
)
from evaluators.result import RUN_FIELDS as RUN_KEYS
from nas.search.storage.records import (
    EVALUATOR_PREFIXES,
    INFEASIBLE,
    INTERMEDIATE,
    SPEC,
    evaluator_of,
    is_infeasible,
    settings_of,
    state_name,
)

#: user attributes that say where a trial's architecture came from
ORIGIN_KEYS = ("seed_arch", "parent", "mutated", "duplicate_of", "requeued_from")


def metrics_of(t: FrozenTrial, evaluator: str = "lm") -> dict[str, Any]:
    """The measured metrics of a trial, in METRICS order (only those it has), then the evaluator's own
    (``probe_*``, ``prescreen_*``).  Scored by another ``evaluator`` than ``lm``, its recorded ``val_loss``
    is a probe score's 1 - score or a proxy's value: it is given under that value's own name and as that
    value (``probe_score``, ``proxy_value``: :func:`evaluators.result.measure_of`), with no perplexity or
    bits per byte derived from it."""
    measure = measure_of(evaluator)
    derived = () if measure.lm else ("val_ppl", "val_bpb")
    out = {}
    for k in METRICS + RUN_KEYS:
        value = t.user_attrs.get(k)
        if value is None or k in derived:
            continue
        if k == "val_loss" and not measure.lm:
            k, value = measure.key, measure.shown(value)
        out[k] = value
    out.update({k: v for k, v in t.user_attrs.items() if k.startswith(EVALUATOR_PREFIXES) and v is not None})
    return out


def origin(t: FrozenTrial) -> str:
    """Where a trial's architecture came from, in a few words ("" for a plain sample)."""
    ua = t.user_attrs
    parts = []
    if ua.get("seed_arch"):
        parts.append(f"seed {ua['seed_arch']}")
    if ua.get("parent") is not None:
        gene = f" ({ua['mutated']})" if ua.get("mutated") else ""
        parts.append(f"child of #{ua['parent']}{gene}")
    if ua.get("duplicate_of") is not None:
        parts.append(f"same as #{ua['duplicate_of']}")
    if ua.get("requeued_from") is not None:
        parts.append(f"re-run of #{ua['requeued_from']}")
    return ", ".join(parts)


def _seed_itself(name: str, raw: Any) -> tuple[bool | None, str | None]:
    """Whether a seeded trial's architecture is the shipped seed ``name`` itself (its vocabulary aside),
    and the seed's own summary; (None, None) when the seed is not known here any more."""
    import dataclasses

    from nas.errors import ConfigError
    from nas.models import ArchConfig
    from nas.search.space.sampling import seed_arch

    try:
        arch, seed = ArchConfig.from_dict(raw), seed_arch(name)
    except (ConfigError, OSError, KeyError):
        return None, None
    return dataclasses.replace(seed, vocab_size=arch.vocab_size).arch_id == arch.arch_id, seed.summary()


def trial_detail(study: optuna.Study, t: FrozenTrial) -> dict[str, Any]:
    """Everything ``show`` says about one trial, as plain data (its ``--json``)."""
    from nas.errors import ConfigError
    from nas.models import ATTENTION, ArchConfig
    from nas.models.cost import compute, layer_rows  # torch: imported when needed

    ua = t.user_attrs
    out: dict[str, Any] = {
        "study": study.study_name,
        "trial": t.number,
        "state": state_name(t),
        # an infeasible trial's infinite loss is the sampler's, not a result (and not JSON)
        "values": list(t.values) if t.values and not is_infeasible(t) else None,
        "arch_id": ua.get("arch_id"),
        "summary": ua.get("summary"),
        "origin": origin(t),
        # only a language model's loss has a perplexity and bits per byte (not a probe score, a proxy)
        "evaluator": evaluator_of(study),
    }
    for key in ORIGIN_KEYS + ("fail_reason", "pruned_at", INFEASIBLE):
        out[key] = ua.get(key)
    if ua.get("seed_arch") and ua.get("arch"):  # the seed's layer at this space's sizes, or the seed itself?
        out["seed_itself"], out["seed_summary"] = _seed_itself(str(ua["seed_arch"]), ua["arch"])
    if out["state"] == "REQUEUED":  # the trial that ran it again (None: not run yet)
        again = [
            r.number
            for r in study.get_trials(deepcopy=False)
            if r.user_attrs.get("requeued_from") == t.number
        ]
        out["requeued_as"] = again[0] if again else None
    out["metrics"] = metrics_of(t, out["evaluator"])
    out["intermediate"] = dict(sorted((ua.get(INTERMEDIATE) or {}).items(), key=lambda kv: float(kv[0])))
    # the study's hurdles, each shown whether or not this trial has a value of its own at it
    search = (study.user_attrs.get(SPEC) or {}).get("search") or {}
    out["hurdles"] = sorted({float(f) for f in search.get("hurdles") or ()})
    out["optuna_params"] = dict(t.params)
    out["started"] = t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else None
    out["completed"] = t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else None
    out["arch"] = ua.get("arch")
    out["layers"] = []
    if ua.get("arch") is None:
        return out
    try:
        arch = ArchConfig.from_dict(ua["arch"])
    except ConfigError as err:
        # recorded by a version whose rules it met (a sliding_window mixture component was mha's logits
        # under its name): the trial is still shown, without what only a built architecture gives
        out["arch_error"] = str(err)
        return out
    recipe = settings_of(study).get("recipe") or {}
    seq_len = recipe.get("seq_len") or arch.max_len
    c = compute(arch, seq_len)
    out["seq_len"] = seq_len
    for stack, i, layer, params, f in layer_rows(arch, seq_len):
        out["layers"].append(
            {
                "layer": i,
                "stack": stack,  # layers (an LM), encoder or decoder (seq2seq: with its cross-attention)
                "attention": layer.attention.to_dict(),
                "ffn": {"activation": layer.ffn.activation, "mult": layer.ffn.mult},
                "ffn_in_attention": bool(ATTENTION.get(layer.attention.type).replaces_ffn),
                "params": params,
                "fwd_flops_per_token": f.fwd,
                "train_flops_per_token": f.train,
            }
        )
    out["hurdle_steps"] = _hurdle_steps(study, out, c, seq_len)
    d, V = arch.d_model, arch.vocab_size
    out["embedding_params"] = c.embedding_params
    out["head_fwd_flops_per_token"] = 2.0 * d * V
    out["total"] = {
        "params": c.params,
        "non_embedding_params": c.non_embedding_params,
        "fwd_flops_per_token": c.fwd_flops_per_token,
        "train_flops_per_token": c.train_flops_per_token,
        "state_bytes": c.state_bytes,
    }
    return out


def _hurdle_steps(study: optuna.Study, out: dict[str, Any], c: Any, seq_len: int) -> dict[str, int]:
    """{fraction key: the step its hurdle is measured after}, by the trainer's rule; {} when the budget
    fixes no step count (seconds) or the record says too little to count them."""
    from evaluators.budget import eval_step, plan_steps
    from evaluators.stopping import fraction_key
    from nas.errors import ConfigError
    from nas.spec.training import Budget

    settings = settings_of(study)
    fractions = {float(f) for f in out["intermediate"]} | set(out["hurdles"])
    try:
        budget = Budget.from_dict(settings.get("budget"))
        total = plan_steps(budget, c, int((settings.get("recipe") or {})["batch_size"]), int(seq_len))
    except (ConfigError, KeyError, TypeError, ValueError):
        return {}
    if total is None:
        return {}
    return {fraction_key(f): eval_step(f, total) for f in sorted(fractions) if f > 0}


def format_trial(detail: dict[str, Any]) -> str:
    """``show``'s text: header, origin, the layer table, metrics and hurdles."""
    lines = _header_lines(detail)
    if detail["layers"]:
        lines += ["", *_layer_table(detail)]
    if detail.get("arch_error"):
        lines += ["", f"layers: not shown: its recorded architecture is not one this version builds "
                      f"({detail['arch_error']})"]  # fmt: skip
    lines += _metric_lines(detail)
    lines += sample_lines(detail["metrics"].get("samples"))
    lines += _hurdle_lines(detail)
    if detail.get("tensorboard"):
        lines += ["", f"TensorBoard run: {detail['tensorboard']}"]
    weights = detail.get("weights")
    if weights:
        lines += [
            f"kept weights: {weights['file']} ({weights['bytes']:,} bytes)"
            if weights.get("kept")
            else f"kept weights: gone or changed ({weights['file']}: deleted when the trial dropped out "
            "of the best resources.keep_weights, or edited since)"
        ]
    return "\n".join(lines)


def _header_lines(d: dict[str, Any]) -> list[str]:
    lines = [
        f"study {d['study']!r}, trial {d['trial']}: {d['state']}"
        + (f"   arch {d['arch_id']}" if d.get("arch_id") else "")
    ]
    if d.get("summary"):
        lines.append(f"  {d['summary']}")
    if d.get("seed_arch") and d.get("seed_itself") is False:  # the space reshaped it: not the seed itself
        lines.append(
            f"  seeded with the blocks of the known architecture {d['seed_arch']!r} (attention, activation, "
            f"positions, norm) at this space's sizes and widths (not {d['seed_arch']!r} itself, which is "
            f"{d.get('seed_summary')})"
        )
    elif d.get("seed_arch"):
        lines.append(f"  seeded as the known architecture {d['seed_arch']!r}")
    if d.get("parent") is not None:
        gene = f", mutated gene {d['mutated']}" if d.get("mutated") else ""
        lines.append(f"  evolved from trial {d['parent']}{gene}")
    if d.get("duplicate_of") is not None:
        lines.append(f"  same architecture as trial {d['duplicate_of']}: its result was reused")
    if d.get("requeued_from") is not None:
        lines.append(f"  re-run of trial {d['requeued_from']} (its driver stopped while it ran)")
    if d["state"] == "FAIL":
        lines.append(f"  failed: {d.get('fail_reason') or 'no reason recorded'}")
    if d["state"] == "REQUEUED":
        again = d.get("requeued_as")
        then = f"run again as trial {again}" if again is not None else "queued to run again"
        lines.append(f"  interrupted ({d.get('fail_reason') or 'its driver stopped'}); {then}")
    if d["state"] == "INFEASIBLE":
        lines.append(f"  not trained: {d.get(INFEASIBLE) or 'over the space constraints'}")
    if d["state"] == "PRUNED":
        at = d.get("pruned_at")
        if at == 0:
            lines.append("  pruned: screened out by the prescreen before training")
        else:
            lines.append(
                f"  pruned: stopped at hurdle {at:g} of the budget"
                if isinstance(at, (int, float))
                else "  pruned by a hurdle"
            )
    return lines


def _ffn_text(row: dict[str, Any]) -> str:
    text = f"{row['ffn']['activation']} x{row['ffn']['mult']:g}"
    return text + " (branches)" if row["ffn_in_attention"] else text  # multi_branch runs it per head


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _layer_table(d: dict[str, Any]) -> list[str]:
    from nas.models import AttentionSpec  # torch: imported when needed

    cross = {"decoder": " + cross", "encoder": " (bidirectional)"}
    atts = [
        AttentionSpec.from_raw(row["attention"]).text() + cross.get(row.get("stack", ""), "")
        for row in d["layers"]
    ]
    names = [_row_name(row) for row in d["layers"]]
    ffns = [_ffn_text(row) for row in d["layers"]]
    wa = max(len("attention"), *(len(x) for x in atts))
    wf = max(len("ffn"), *(len(x) for x in ffns))
    head = (
        f"{'layer':>5}  {'attention':<{wa}}  {'ffn':<{wf}}  {'params':>10}  "
        f"{'fwd FLOPs/tok':>13}  {'train FLOPs/tok':>15}"
    )
    lines = [head, "-" * len(head)]
    for row, name, att, ffn in zip(d["layers"], names, atts, ffns, strict=True):
        lines.append(
            f"{name:>5}  {att:<{wa}}  {ffn:<{wf}}  {_num(row['params']):>10}  "
            f"{_num(row['fwd_flops_per_token']):>13}  {_num(row['train_flops_per_token']):>15}"
        )
    head_fwd = d["head_fwd_flops_per_token"]
    rest = d["total"]["params"] - sum(r["params"] for r in d["layers"])
    seq2seq = any(row.get("stack") == "decoder" for row in d["layers"])
    label = "embeddings, final norms, LM head" if seq2seq else "embeddings, final norm, LM head"
    lines.append(
        f"{'':>5}  {label:<{wa + wf + 2}}  {_num(rest):>10}  {_num(head_fwd):>13}  {_num(3 * head_fwd):>15}"
    )
    tot = d["total"]
    lines.append(
        f"{'total':>5}  {'':<{wa + wf + 2}}  {_num(tot['params']):>10}  "
        f"{_num(tot['fwd_flops_per_token']):>13}  {_num(tot['train_flops_per_token']):>15}"
    )
    lines.append(
        f"  (FLOPs per token at sequence length {d['seq_len']}; "
        f"{_num(tot['non_embedding_params'])} non-embedding params; "
        f"{_num(tot['state_bytes'])} bytes of state per sequence while generating)"
    )
    return lines


def _row_name(row: dict[str, Any]) -> str:
    """``3`` for an LM's layer; ``enc 0`` / ``dec 1`` for a seq2seq model's."""
    prefix = {"encoder": "enc ", "decoder": "dec "}.get(row.get("stack", ""), "")
    return f"{prefix}{row['layer']}"


def _metric_lines(d: dict[str, Any]) -> list[str]:
    m = d["metrics"]
    measure = measure_of(d.get("evaluator"))
    if measure.key not in m and "train_flops" not in m:  # a failed trial may have trained without a loss
        return []
    lines = ["", "metrics"]
    loss = m.get(measure.key)
    label = "val loss" if measure.lm else measure.column
    label += " at stop" if d["state"] == "PRUNED" else ""
    if isinstance(loss, (int, float)) and math.isfinite(loss):
        lines.append(f"  {label:<16} {loss:.4f}{_loss_units(d, loss)}")
    elif measure.key in m:
        lines.append(f"  {label:<16} {loss} (not a finite number: training diverged)")
    if ("tokens" in m or "steps" in m) and measure.trains:  # a proxy trains nothing: no "trained 0 steps"
        until = {"FAIL": "  (until it failed)", "REQUEUED": "  (until it was interrupted)"}.get(
            d["state"], ""
        )
        lines.append(
            f"  {'trained':<16} {_num(m.get('steps'))} {'step' if m.get('steps') == 1 else 'steps'}, "
            f"{_num(m.get('tokens'))} tokens, "
            f"{m.get('train_flops', float('nan')):.3g} FLOPs{until}"
        )
    if "seconds" in m:
        speed = f" ({m['tokens_per_s']:,.0f} tokens/s)" if m.get("tokens_per_s") else ""
        lines.append(f"  {'time':<16} {m['seconds']:.1f} s{speed}")
    own = {k: v for k, v in m.items() if k.startswith(EVALUATOR_PREFIXES)}
    width = max((16, *(len(k) for k in own)))
    for key, value in own.items():
        lines.append(
            f"  {key:<{width}} {value:.4g}" if isinstance(value, float) else f"  {key:<{width}} {value}"
        )
    return lines


def _loss_units(d: dict[str, Any], loss: float) -> str:
    """What a finite ``val_loss`` is: nats per token, with its perplexity and the bits per byte the trainer
    recorded (loss / ln 2 / the corpus's bytes per token; none when the corpus does not know them).  An
    evaluator other than ``lm`` (a probe score, a proxy) scores something else: nothing is derived."""
    if d.get("evaluator", "lm") != "lm":
        return f"  ({measure_of(d['evaluator']).name}, of {d['evaluator']})"
    bpb = d["metrics"].get("val_bpb")
    per_byte = f", {bpb:.4f} bits/byte" if isinstance(bpb, (int, float)) else ""
    return f" nats/token  (perplexity {perplexity(loss):.3f}{per_byte})"


def _hurdle_lines(d: dict[str, Any]) -> list[str]:
    if not d["intermediate"]:
        return []
    m = d["metrics"]
    measure = measure_of(d.get("evaluator"))
    lines = ["", f"hurdles ({measure.name} at a fraction of the budget)"]
    stop = d.get("pruned_at") if d["state"] == "PRUNED" else None
    steps: dict[str, int] = d.get("hurdle_steps") or {}
    inter: dict[str, float] = d["intermediate"]
    keys = {float(k): k for k in inter}
    for f in d.get("hurdles") or ():  # every hurdle of the study, also one this trial has no value at
        keys.setdefault(float(f), f"{float(f):g}")
    for f, key in sorted(keys.items()):
        # hurdles that round to one step are measured once, by one evaluation (an older record kept one)
        mates = [k for k in steps if k != key and key in steps and steps[k] == steps[key]]
        value = inter.get(key, next((inter[k] for k in mates if k in inter), None))
        mark = "  (missed it: stopped here)" if stop is not None and f == float(stop) else ""
        what = "  (the prescreen's value, before training)" if f == 0 else ""
        if mates:
            what = f"  (step {steps[key]}, the same step as hurdle {', '.join(mates)})"
        if value is None:
            later = stop is not None and f > float(stop)
            lines.append(f"  {f:>5g}  {'-':>6}  ({'not reached' if later else 'no value recorded'})")
            continue
        shown = value if f == 0 else measure.shown(value)  # the prescreen's value is its own
        lines.append(f"  {f:>5g}  {shown:.4f}{what}{mark}")
    if measure.key in m and d["state"] == "COMPLETE":
        lines.append(f"  {1:>5g}  {m[measure.key]:.4f}  (final)")
    return lines
