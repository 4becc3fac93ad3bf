"""Small studies built directly with Optuna, shaped as the search driver writes them.

No Ray and no training: each trial carries a real ArchConfig (so ``show`` and
``export`` have real architectures to work on) and the user attributes of
``nas.search.driver.loop``: arch, arch_id, summary, params, flops_per_token, the
measured metrics, hurdle losses, and parent/mutated/duplicate_of/seed_arch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from nas import ArchConfig, compute
from nas.spec.training import TrainRecipe

ARCHS: dict[str, dict[str, Any]] = {
    "vanilla": {
        "d_model": 32,
        "n_heads": 4,
        "max_len": 16,
        "layers": {"repeat": 2, "attention": "mha", "ffn": {"activation": "relu", "mult": 4}},
    },
    "primer": {
        "d_model": 32,
        "n_heads": 4,
        "max_len": 16,
        "layers": {
            "repeat": 2,
            "attention": {"type": "mdha", "kernel": 3},
            "ffn": {"activation": "squared_relu", "mult": 4},
        },
    },
    "synth": {
        "d_model": 32,
        "n_heads": 4,
        "max_len": 16,
        "layers": [
            {"attention": "synth_dense", "ffn": {"activation": "gelu", "mult": 2}},
            {
                "attention": {"type": "synth_factorized_random", "rank": 4},
                "ffn": {"activation": "relu", "mult": 2},
            },
        ],
    },
    "mixed": {
        "d_model": 48,
        "n_heads": 4,
        "max_len": 16,
        "layers": [
            {"attention": {"type": "mixture", "components": ["mha", "synth_random"]}, "ffn": "gelu"},
            {"attention": {"type": "mdha", "kernel": 5}, "ffn": {"activation": "squared_relu", "mult": 2}},
            {"attention": "multi_branch", "ffn": {"activation": "silu", "mult": 4}},
        ],
    },
    "small": {
        "d_model": 16,
        "n_heads": 2,
        "max_len": 16,
        "layers": [{"attention": "mha", "ffn": {"activation": "relu", "mult": 2}}],
    },
}

RECIPE = TrainRecipe(batch_size=4, lr=1e-3, eval_batches=2, log_every=1, seed=7).to_dict()
BUDGET = {"steps": 3}


def arch(name: str) -> ArchConfig:
    return ArchConfig.from_dict(ARCHS[name])


def _params_of(a: ArchConfig) -> tuple[dict[str, Any], dict[str, CategoricalDistribution]]:
    params: dict[str, Any] = {"d_model": a.d_model, "n_layers": a.n_layers}
    dists = {"d_model": CategoricalDistribution([16, 32, 48]), "n_layers": CategoricalDistribution([1, 2, 3])}
    for i, layer in enumerate(a.layers):
        params[f"layers.{i}.attention"] = layer.attention.type
        dists[f"layers.{i}.attention"] = CategoricalDistribution(
            ["mha", "mdha", "synth_dense", "synth_factorized_random", "mixture", "multi_branch"]
        )
        params[f"layers.{i}.ffn.activation"] = layer.ffn.activation
        dists[f"layers.{i}.ffn.activation"] = CategoricalDistribution(
            ["relu", "squared_relu", "gelu", "silu"]
        )
    return params, dists


def add_trial(
    study: optuna.Study,
    arch_name: str | None,
    loss: float | None = None,
    state: TrialState = TrialState.COMPLETE,
    **extra: Any,
) -> None:
    """Add one finished trial the way the driver records it."""
    ua: dict[str, Any] = {}
    params: dict[str, Any] = {}
    dists: dict[str, Any] = {}
    values = None
    if arch_name is not None:
        a = arch(arch_name)
        c = compute(a, RECIPE["seq_len"] or a.max_len)
        params, dists = _params_of(a)
        ua.update(
            arch=a.to_dict(),
            arch_id=a.arch_id,
            summary=a.summary(),
            params=c.params,
            flops_per_token=c.fwd_flops_per_token,
        )
        if loss is not None:
            tokens = 3 * RECIPE["batch_size"] * a.max_len
            ua.update(
                val_loss=loss,
                val_ppl=math.exp(loss),
                val_bpb=loss / math.log(2),
                non_embedding_params=c.non_embedding_params,
                train_flops_per_token=c.train_flops_per_token,
                train_flops=c.train_flops_per_token * tokens,
                tokens=tokens,
                steps=3,
                tokens_per_s=1234.5,
                seconds=0.5,
            )
        if state == TrialState.COMPLETE:
            values = [loss] if len(study.directions) == 1 else [loss, c.fwd_flops_per_token]
    ua.update(extra)
    study.add_trial(
        optuna.trial.create_trial(
            state=state,
            values=values,
            params=params,
            distributions=dists,
            user_attrs=ua,
        )
    )


def make_study(runs: Path, name: str, objective: str = "loss+flops") -> optuna.Study:
    """An empty study in the default layout: ``runs/<name>/study.db``, with the driver's settings."""
    (runs / name).mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name=name,
        storage=f"sqlite:///{runs / name / 'study.db'}",
        directions=["minimize"] * (2 if objective == "loss+flops" else 1),
    )
    study.set_user_attr(
        "settings",
        {
            "space_fingerprint": "0123456789ab",
            "space_file": "search_spaces/default.yaml",
            "objective": objective,
            "budget": BUDGET,
            "recipe": RECIPE,
            "data": "shakespeare",
            "seed": 7,
        },
    )
    return study


def fill(study: optuna.Study) -> None:
    """Ten trials: seeds, an evolved child, a duplicate, a pruned and two failed ones."""
    add_trial(study, "vanilla", 2.50, seed_arch="vanilla", intermediate={"0.25": 3.9, "0.5": 3.1})
    add_trial(study, "primer", 2.30, seed_arch="primer_ez", intermediate={"0.25": 3.7, "0.5": 2.9})
    add_trial(study, "synth", 2.90, intermediate={"0.25": 4.2, "0.5": 3.6})
    add_trial(
        study, "mixed", 2.20, parent=1, mutated="layers.0.attention", intermediate={"0.25": 3.5, "0.5": 2.8}
    )
    add_trial(study, "small", 2.80, intermediate={"0.25": 4.4, "0.5": 3.5})
    add_trial(
        study,
        "primer",
        2.30,
        duplicate_of=1,
        parent=3,
        mutated="layers.0.ffn.activation",
        intermediate={"0.25": 3.7, "0.5": 2.9},
    )
    add_trial(study, "synth", 4.60, state=TrialState.PRUNED, pruned_at=0.25, intermediate={"0.25": 4.6})
    add_trial(study, "mixed", None, state=TrialState.FAIL, fail_reason="diverged")
    add_trial(study, None, None, state=TrialState.FAIL, fail_reason="over cap: params 2,000,000 > max_params")
    add_trial(
        study,
        "vanilla",
        2.45,
        parent=0,
        mutated="layers.1.ffn.activation",
        intermediate={"0.25": 3.8, "0.5": 3.0},
    )
