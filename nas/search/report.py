"""Leaderboards and Pareto fronts of a study, as rows and as a text table."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from evaluators.result import METRICS  # the measured metrics a finished trial carries in its user attributes
from evaluators.result import RUN_FIELDS as RUN_KEYS  # how a trial was run (CPU results depend on threads)
from nas.errors import UserError
from nas.search.hurdles import INTERMEDIATE
from nas.search.study import default_storage, is_optuna_sqlite, load_study, open_storage


def _row(t: FrozenTrial, pareto: bool) -> dict[str, Any]:
    ua = t.user_attrs
    loss = t.values[0] if t.values else ua.get("val_loss")
    return {
        "trial": t.number,
        "val_loss": loss,
        "val_ppl": math.exp(loss) if loss is not None else None,
        "val_bpb": loss / math.log(2) if loss is not None else None,
        "flops_per_token": ua.get("flops_per_token"),
        "params": ua.get("params"),
        "arch_id": ua.get("arch_id"),
        "summary": ua.get("summary", ""),
        "pareto": pareto,
        "parent": ua.get("parent"),
        "mutated": ua.get("mutated"),
        "seed_arch": ua.get("seed_arch"),
        "duplicate_of": ua.get("duplicate_of"),
        "origin": origin(t),
    }


def leaderboard(study: optuna.Study, top: int | None = None) -> list[dict[str, Any]]:
    """The Pareto front (multi-objective) or the best trials by loss (single objective)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(study.directions) > 1:
        front = {t.number for t in study.best_trials}
        chosen = sorted((t for t in complete if t.number in front), key=lambda t: t.values[0])
        rows = [_row(t, True) for t in chosen]
    else:
        chosen = sorted(complete, key=lambda t: t.values[0])
        rows = [_row(t, False) for t in chosen]
    return rows[:top] if top else rows


def _human(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def format_table(rows: list[dict[str, Any]], with_origin: bool = False) -> str:
    """Rows of ``leaderboard`` as a text table; ``with_origin`` adds where each architecture came from."""
    width = max([len("origin")] + [len(r.get("origin") or "-") for r in rows]) if with_origin else 0
    mid = f"  {'origin':<{width}}" if with_origin else ""
    head = (f"{'trial':>5}  {'loss':>7}  {'ppl':>7}  {'bpb':>6}  {'FLOPs/tok':>9}  {'params':>8}{mid}  "
            "architecture")
    lines = [head, "-" * len(head)]
    for r in rows:
        mid = f"  {r.get('origin') or '-':<{width}}" if with_origin else ""
        lines.append(
            f"{r['trial']:>5}  {r['val_loss']:>7.4f}  {r['val_ppl']:>7.2f}  {r['val_bpb']:>6.3f}  "
            f"{_human(r['flops_per_token']):>9}  {_human(r['params']):>8}{mid}  {r['summary']}"
        )
    return "\n".join(lines)


def state_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------
# Inspection: the read-only side of a study (``best``, ``show``, ``plot``, ``export``)
# ---------------------------------------------------------------------------------------------
#: user attributes that say where a trial's architecture came from
ORIGIN_KEYS = ("seed_arch", "parent", "mutated", "duplicate_of", "requeued_from")


def list_studies(runs_dir: str | os.PathLike[str]) -> list[str]:
    """Names of the studies with a default-storage database under ``runs_dir``."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/study.db") if p.is_file())


def open_existing_study(
    name: str, storage: str | None = None, runs_dir: str | os.PathLike[str] = "runs"
) -> tuple[optuna.Study, str]:
    """Load a study that must already exist, creating nothing (no directory, no database).

    ``storage`` defaults to ``sqlite:///<runs_dir>/<name>/study.db``.  Opening a
    missing SQLite file would create an empty database, so the file is checked first.
    Returns the study and the storage URL it came from.
    """
    url = storage or default_storage(runs_dir, name)
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if not path.is_file():
            if storage is None:
                found = list_studies(runs_dir)
                where = f"studies in {runs_dir}/: {', '.join(found)}" if found else (
                    f"{runs_dir}/ holds no studies (start one with: python run_search.py search --study NAME)"
                )
                raise UserError(f"--study {name!r} not found: no {path}; {where}")
            raise UserError(f"--storage {url!r}: no such database file {path}")
        if not is_optuna_sqlite(path):  # opening it would add Optuna's tables to someone else's file
            raise UserError(f"--storage {url!r}: {path} is not an Optuna study database")
    return load_study(open_storage(url, create_dirs=False), name), url


def jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as None, so ``json.dumps`` writes valid JSON."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def get_trial(study: optuna.Study, number: int) -> FrozenTrial:
    """Trial ``number`` of ``study``, or a UserError naming the valid range."""
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.number == number:
            return t
    have = f"trials 0..{trials[-1].number}" if trials else "no trials yet"
    raise UserError(f"--trial {number}: study {study.study_name!r} has {have}")


def best_trial(study: optuna.Study) -> FrozenTrial:
    """Lowest loss among COMPLETE trials (multi-objective: lowest loss on the Pareto front)."""
    rows = leaderboard(study, 1)
    if not rows:
        counts = ", ".join(f"{n} {s}" for s, n in state_counts(study).items()) or "no trials"
        raise UserError(f"--study {study.study_name!r} has no COMPLETE trial to choose from ({counts})")
    return get_trial(study, rows[0]["trial"])


def settings_of(study: optuna.Study) -> dict[str, Any]:
    """What the driver recorded for the whole study (space, objective, budget, recipe, data, seed)."""
    return dict(study.user_attrs.get("settings") or {})


def metrics_of(t: FrozenTrial) -> dict[str, Any]:
    """The measured metrics of a trial, in METRICS order (only those it has)."""
    return {k: t.user_attrs[k] for k in METRICS + RUN_KEYS if t.user_attrs.get(k) is not None}


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


def format_leaderboard(study: optuna.Study, rows: list[dict[str, Any]]) -> str:
    """A heading that says what the rows are, then the table (with an origin column)."""
    settings = settings_of(study)
    counts = state_counts(study)
    total = sum(counts.values())
    order = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")
    states = ", ".join(f"{counts[s]} {s.lower()}" for s in order if counts.get(s))
    facts = [f"{total} trials ({states or 'none finished'})"]
    if settings.get("objective"):
        facts.append(f"objective {settings['objective']}")
    if settings.get("budget"):
        ((kind, value),) = settings["budget"].items()
        facts.append(f"budget {value:g} {kind} per trial")
    lines = [f"study {study.study_name!r}: " + ", ".join(facts)]
    if len(study.directions) > 1:
        lines.append(f"Pareto front (val loss vs FLOPs/token): {len(rows)} trial(s), lowest loss first")
    else:
        lines.append(f"best {len(rows)} trial(s) by val loss:")
    if not rows:
        lines.append("(no completed trial yet)")
        return "\n".join(lines)
    lines.append(format_table(rows, with_origin=True))
    return "\n".join(lines)


def _attention_text(spec: dict[str, Any]) -> str:
    """``mdha kernel=3``; a mixture lists its components and weights."""
    opts = {k: v for k, v in spec.items() if k != "type"}
    if spec["type"] == "mixture":
        parts = [_attention_text(c) for c in opts.get("components", [])]
        weights = opts.get("weights", "learned")
        w = weights if isinstance(weights, str) else "/".join(f"{x:.2g}" for x in weights)
        return f"mixture({' + '.join(parts)}; {w})"
    if not opts:
        return spec["type"]
    return spec["type"] + " " + " ".join(f"{k}={v}" for k, v in opts.items())


def trial_detail(study: optuna.Study, t: FrozenTrial) -> dict[str, Any]:
    """Everything ``show`` says about one trial, as plain data (its ``--json``)."""
    from nas.compute import compute, layer_flops, layer_params
    from nas.models import ATTENTION, ArchConfig

    ua = t.user_attrs
    out: dict[str, Any] = {
        "study": study.study_name,
        "trial": t.number,
        "state": t.state.name,
        "values": list(t.values) if t.values else None,
        "arch_id": ua.get("arch_id"),
        "summary": ua.get("summary"),
        "origin": origin(t),
    }
    for key in ORIGIN_KEYS + ("fail_reason", "pruned_at"):
        out[key] = ua.get(key)
    out["metrics"] = metrics_of(t)
    out["intermediate"] = dict(sorted((ua.get(INTERMEDIATE) or {}).items(), key=lambda kv: float(kv[0])))
    out["optuna_params"] = dict(t.params)
    out["started"] = t.datetime_start.isoformat(timespec="seconds") if t.datetime_start else None
    out["completed"] = t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else None
    out["arch"] = ua.get("arch")
    out["layers"] = []
    if ua.get("arch") is None:
        return out
    arch = ArchConfig.from_dict(ua["arch"])
    recipe = settings_of(study).get("recipe") or {}
    seq_len = recipe.get("seq_len") or arch.max_len
    c = compute(arch, seq_len)
    out["seq_len"] = seq_len
    for i, layer in enumerate(arch.layers):
        f = layer_flops(arch, layer, seq_len)
        out["layers"].append({
            "layer": i,
            "attention": layer.attention.to_dict(),
            "ffn": {"activation": layer.ffn.activation, "mult": layer.ffn.mult},
            "ffn_in_attention": bool(ATTENTION.get(layer.attention.type).replaces_ffn),
            "params": layer_params(arch, layer),
            "fwd_flops_per_token": f.fwd,
            "train_flops_per_token": f.train,
        })
    d, V = arch.d_model, arch.vocab_size
    out["embedding_params"] = c.embedding_params
    out["head_fwd_flops_per_token"] = 2.0 * d * V
    out["total"] = {
        "params": c.params,
        "non_embedding_params": c.non_embedding_params,
        "fwd_flops_per_token": c.fwd_flops_per_token,
        "train_flops_per_token": c.train_flops_per_token,
    }
    return out


def _ffn_text(row: dict[str, Any]) -> str:
    text = f"{row['ffn']['activation']} x{row['ffn']['mult']:g}"
    return text + " (branches)" if row["ffn_in_attention"] else text  # multi_branch runs it per head


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def format_trial(detail: dict[str, Any]) -> str:
    """``show``'s text: header, origin, the layer table, metrics and hurdles."""
    d = detail
    lines = [f"study {d['study']!r}, trial {d['trial']}: {d['state']}"
             + (f"   arch {d['arch_id']}" if d.get("arch_id") else "")]
    if d.get("summary"):
        lines.append(f"  {d['summary']}")
    if d.get("seed_arch"):
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
    if d["state"] == "PRUNED":
        at = d.get("pruned_at")
        lines.append(f"  pruned: stopped at hurdle {at:g} of the budget" if isinstance(at, (int, float))
                     else "  pruned by a hurdle")
    if d["layers"]:
        atts = [_attention_text(row["attention"]) for row in d["layers"]]
        ffns = [_ffn_text(row) for row in d["layers"]]
        wa = max(len("attention"), *(len(x) for x in atts))
        wf = max(len("ffn"), *(len(x) for x in ffns))
        head = (f"{'layer':>5}  {'attention':<{wa}}  {'ffn':<{wf}}  {'params':>10}  "
                f"{'fwd FLOPs/tok':>13}  {'train FLOPs/tok':>15}")
        lines += ["", head, "-" * len(head)]
        for row, att, ffn in zip(d["layers"], atts, ffns, strict=True):
            lines.append(
                f"{row['layer']:>5}  {att:<{wa}}  {ffn:<{wf}}  {_num(row['params']):>10}  "
                f"{_num(row['fwd_flops_per_token']):>13}  {_num(row['train_flops_per_token']):>15}"
            )
        head_fwd = d["head_fwd_flops_per_token"]
        rest = d["total"]["params"] - sum(r["params"] for r in d["layers"])
        label = "embeddings, final norm, LM head"
        lines.append(
            f"{'':>5}  {label:<{wa + wf + 2}}  {_num(rest):>10}  "
            f"{_num(head_fwd):>13}  {_num(3 * head_fwd):>15}"
        )
        tot = d["total"]
        lines.append(
            f"{'total':>5}  {'':<{wa + wf + 2}}  {_num(tot['params']):>10}  "
            f"{_num(tot['fwd_flops_per_token']):>13}  {_num(tot['train_flops_per_token']):>15}"
        )
        lines.append(f"  (FLOPs per token at sequence length {d['seq_len']}; "
                     f"{_num(tot['non_embedding_params'])} non-embedding params)")
    m = d["metrics"]
    if "val_loss" in m:
        lines += ["", "metrics"]
        loss = m["val_loss"]
        label = "val loss at stop" if d["state"] == "PRUNED" else "val loss"
        if isinstance(loss, (int, float)) and math.isfinite(loss):
            lines.append(f"  {label:<16} {loss:.4f} nats/token  (perplexity {math.exp(min(loss, 700)):.3f}, "
                         f"{loss / math.log(2):.4f} bits/byte)")
        else:
            lines.append(f"  {label:<16} {loss} (not a finite number: training diverged)")
        if "tokens" in m or "steps" in m:
            lines.append(f"  {'trained':<16} {_num(m.get('steps'))} steps, {_num(m.get('tokens'))} tokens, "
                         f"{m.get('train_flops', float('nan')):.3g} FLOPs")
        if "seconds" in m:
            speed = f" ({m['tokens_per_s']:,.0f} tokens/s)" if m.get("tokens_per_s") else ""
            lines.append(f"  {'time':<16} {m['seconds']:.1f} s{speed}")
    if d["intermediate"]:
        lines += ["", "hurdles (val loss at a fraction of the budget)"]
        stop = d.get("pruned_at") if d["state"] == "PRUNED" else None
        for key, value in d["intermediate"].items():
            mark = "  (missed it: stopped here)" if stop is not None and float(key) == float(stop) else ""
            lines.append(f"  {float(key):>5g}  {value:.4f}{mark}")
        if "val_loss" in m and d["state"] == "COMPLETE":
            lines.append(f"  {1:>5g}  {m['val_loss']:.4f}  (final)")
    if d.get("tensorboard"):
        lines += ["", f"TensorBoard run: {d['tensorboard']}"]
    return "\n".join(lines)
