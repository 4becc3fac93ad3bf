"""Which blocks the best trials chose, layer by layer, against how often the sampler drew each at all.

``best --by-layer`` prints it; ``plot``'s ``blocks_by_layer.png`` draws the top trials' half.
The base rate matters: a block every one of the top trials uses at a layer says little if the
sampler drew it for most trials there, and much if it drew it for a few.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from nas.search.storage.records import is_infeasible

GENES = ("attention", "activation")


def layer_choices(
    t: FrozenTrial, detail: bool = False, from_top: bool = False
) -> list[tuple[tuple[int, int], str, str]]:
    """((stack, index), block, activation) per layer; stack 0 is a seq2seq encoder, 1 the LM or decoder.

    ``detail``: a mixture is named by its components (``mixture(mha+synth_random)``), since two
    mixtures of different blocks are different choices.  ``from_top``: indices count from the top
    (-1 is the last layer), so that a pinned last layer has one index whatever the depth.
    """
    arch = t.user_attrs.get("arch") or {}
    out = []
    for stack, key in ((0, "encoder_layers"), (1, "layers")):
        layers = arch.get(key) or []
        for i, layer in enumerate(layers):
            if from_top:
                i -= len(layers)
            att = layer["attention"]
            name = att["type"]
            if detail and att.get("components"):
                name += "(" + "+".join(c["type"] for c in att["components"]) + ")"
            out.append(((stack, i), name, layer["ffn"]["activation"]))
    return out


def slot_name(slot: tuple[int, int], seq2seq: bool) -> str:
    """``"2"`` for an LM's layer 2 (``"-1"``: its last, counted from the top); ``"enc 2"`` / ``"dec 2"`` in a
    seq2seq study."""
    stack, i = slot
    return f"{('enc', 'dec')[stack]} {i}" if seq2seq else str(i)


def top_trials(study: optuna.Study, top: int) -> list[FrozenTrial]:
    """The ``top`` COMPLETE trials with a result (not over the caps), lowest validation loss first."""
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values and not is_infeasible(t) and layer_choices(t)
    ]
    return sorted(done, key=lambda t: t.values[0])[:top]


def own_menus(study: optuna.Study) -> Any:
    """``(i, n) -> bool``: whether layer ``i`` of an ``n``-layer LM candidate draws from a ``layers.at``
    entry of its own (a pinned last layer), read from the study's kept spec (torch-free: a read command
    loads no block registry); None when the study keeps no spec or its space has no such entry."""
    from nas.search.space.where import covers, parse_where
    from nas.search.storage.records import SPEC

    raw = study.user_attrs.get(SPEC)
    layers = raw.get("layers") if isinstance(raw, dict) else None
    entries = layers.get("at") if isinstance(layers, dict) else None
    if not isinstance(entries, list) or not entries:
        return None
    try:
        wheres = [parse_where(e.get("layers"), "at") for e in entries if isinstance(e, dict)]
    except Exception:  # noqa: BLE001 - a spec this version cannot read: counted as before
        return None
    return lambda i, n: any(covers(pos, first, last, i, n) for pos, first, last in wheres)


def _count(
    trials: Sequence[FrozenTrial], from_top: bool = False, own: Any = None
) -> dict[tuple[tuple[int, int], str], Counter[str]]:
    """Counts per (slot, gene).  ``own`` (:func:`own_menus`): counting from the bottom with depths that
    vary, a layer drawn from a position's own menu is left out (a pinned last layer lands on index 1 of
    a 2-layer and 2 of a 3-layer trial, among the free layers' counts); the count from the top has it."""
    counts: dict[tuple[tuple[int, int], str], Counter[str]] = {}
    for t in trials:
        n = len((t.user_attrs.get("arch") or {}).get("layers") or [])
        for slot, block, activation in layer_choices(t, detail=True, from_top=from_top):
            if own is not None and not from_top and slot[0] == 1 and own(slot[1], n):
                continue
            for gene, name in zip(GENES, (block, activation), strict=True):
                counts.setdefault((slot, gene), Counter())[name] += 1
    return counts


def by_layer(study: optuna.Study, top: int = 10) -> dict[str, Any]:
    """Counts per gene and layer among the ``top`` trials and among every sampled trial.

    Sampled: every trial that has an architecture (complete, pruned or failed, over the caps included):
    what the sampler proposed, the base rate to read the top counts against.
    """
    best = top_trials(study, top)
    sampled = [t for t in study.get_trials(deepcopy=False) if layer_choices(t)]
    # with depths that vary, layer i from the bottom is a different place in different trials: the
    # counts from the top (-1: the last layer) follow as well, where a pinned last layer lines up
    depths = {
        tuple(len(t.user_attrs["arch"].get(k) or []) for k in ("encoder_layers", "layers")) for t in sampled
    }
    rows = []
    own = own_menus(study) if len(depths) > 1 else None
    for from_top in (False, True) if len(depths) > 1 else (False,):
        top_c, all_c = _count(best, from_top, own), _count(sampled, from_top, own)
        seq2seq = any(slot[0] == 0 for slot, _ in all_c)
        rows += [
            {
                "gene": gene,
                "layer": slot_name(slot, seq2seq),
                "top": dict(top_c.get((slot, gene), Counter()).most_common()),
                "sampled": dict(all_c[(slot, gene)].most_common()),
            }
            for gene in GENES
            for slot in sorted({s for s, _ in all_c})
            if (slot, gene) in all_c
        ]
    return {"top": len(best), "sampled": len(sampled), "depths_vary": len(depths) > 1, "rows": rows}


def format_by_layer(table: dict[str, Any]) -> str:
    """The counts as an aligned text table, one line per gene and layer."""
    if not table["rows"]:
        return "no trial has an architecture yet"
    head = ["gene", "layer", f"top {table['top']} by loss", f"all {table['sampled']} sampled"]

    def cell(counts: dict[str, int]) -> str:
        return ", ".join(f"{name} {n}" for name, n in counts.items()) or "-"

    body = [[r["gene"], r["layer"], cell(r["top"]), cell(r["sampled"])] for r in table["rows"]]
    note = (
        "\nThe depth varies: layers are counted from the bottom (0 is the first) and then from the top "
        "(-1 is the last), where a layer pinned at the top lines up whatever the depth; counted from the "
        "bottom, a layer drawn from a position's own menu (layers.at) is left out."
        if table.get("depths_vary")
        else ""
    )
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
             for row in [head, *body]]  # fmt: skip
    return "\n".join(line.rstrip() for line in lines) + note
