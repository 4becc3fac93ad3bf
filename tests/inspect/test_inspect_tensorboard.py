"""A trial's TensorBoard run holds its HParams: train a tiny model as a worker does, read them back."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from evaluators.lm import train_lm
from nas.models import ArchConfig
from nas.spec.training import Budget, TrainRecipe


def _hparams(logdir: Path) -> tuple[dict[str, object], set[str]]:
    """(hyperparameters, scalar tags) that TensorBoard's HParams plugin finds in ``logdir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    starts = [plugin_data_pb2.HParamsPluginData.FromString(c) for c in content.values()]
    infos = [s.session_start_info for s in starts if s.HasField("session_start_info")]
    assert len(infos) == 1, content.keys()
    values: dict[str, object] = {}
    for key, v in infos[0].hparams.items():
        kind = v.WhichOneof("kind")
        values[key] = getattr(v, kind)
    return values, set(acc.Tags()["scalars"])


@pytest.mark.timeout(120)
def test_trial_hparams_read_back(tmp_path: Path) -> None:
    rng = random.Random(0)
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler"]
    text = tmp_path / "tiny.txt"
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(600)))
    arch = ArchConfig.from_dict(
        {
            "d_model": 16,
            "n_heads": 2,
            "max_len": 16,
            "layers": [
                {"attention": {"type": "mdha", "kernel": 3}, "ffn": {"activation": "squared_relu", "mult": 2}}
            ],
        }
    )
    logdir = tmp_path / "tb" / "trial_00003"
    # What the driver sends as the payload's hparams: trial number, arch_id and the Optuna params.
    extra = {
        "trial": 3,
        "arch_id": arch.arch_id,
        "layers.0.attention": "mdha",
        "layers.0.attention.mdha.kernel": 3,
    }
    metrics = train_lm(
        arch,
        TrainRecipe(batch_size=2, eval_batches=1, log_every=1, seed=1),
        Budget("steps", 2),
        str(text),
        device="cpu",
        logdir=logdir,
        log_hparams=extra,
        threads=1,
    )
    hp, scalars = _hparams(logdir)
    assert hp["trial"] == 3 and hp["arch_id"] == arch.arch_id
    assert hp["layers.0.attention"] == "mdha" and hp["layers.0.attention.mdha.kernel"] == 3
    assert hp["summary"] == arch.summary() and hp["seed"] == 1
    assert "hparam/val_loss" in scalars
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    assert acc.Scalars("hparam/val_loss")[-1].value == pytest.approx(metrics.val_loss, rel=1e-6)
