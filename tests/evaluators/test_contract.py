"""The evaluator contract, run over every evaluator registered in ``evaluators.registry.EVALUATORS``.

Each registered kind names a cheap example (``register(..., example=...)``); the suite
builds it from plain settings as a worker does, evaluates a small architecture, and
checks what the driver relies on: a :class:`~evaluators.result.Result` with a finite
loss, the architecture's own id and size, metric names that are strings with finite
numbers; the callback called with the loss at each ``eval_at`` fraction; a True from
the callback honoured (the result says it stopped early, and where); a malformed
name refused with the valid names.  A new evaluator joins the suite by being
registered (docs/adding_an_evaluator.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import nas
from evaluators import registry
from evaluators.base import Progress
from evaluators.registry import EVALUATORS
from evaluators.result import Result
from nas.errors import ConfigError
from nas.spec.training import Budget

ARCH = nas.ArchConfig.from_dict(
    {"d_model": 32, "n_heads": 2, "max_len": 32, "layers": {"repeat": 1, "attention": "mha", "ffn": "relu"}}
)
KINDS = EVALUATORS.names()


def _built(kind: str, corpus_dir: Path) -> registry.Evaluator:
    example = EVALUATORS.get(kind).example
    assert registry.check(example) == example
    settings = {
        "recipe": {"batch_size": 2, "seq_len": 16, "eval_batches": 1, "log_every": 1},
        "data": str(corpus_dir),
        "device": "cpu",
        "threads": 1,
    }
    return registry.build(example, settings)


@pytest.mark.parametrize("kind", KINDS)
def test_every_evaluator_returns_what_the_driver_reads(
    kind: str, corpus_dir: Path, single_thread: None
) -> None:
    seen: list[Progress] = []
    evaluator = _built(kind, corpus_dir)
    result = evaluator.evaluate(ARCH, Budget("steps", 4), lambda p: seen.append(p) or False, eval_at=(0.5,))
    assert isinstance(result, Result)
    assert math.isfinite(result.val_loss)
    assert result.arch_id == ARCH.arch_id
    assert result.params == nas.compute(ARCH).params
    assert not result.stopped_early
    metrics = result.to_dict()
    assert all(isinstance(k, str) and k for k in metrics)
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    halfway = [p for p in seen if p.val_loss is not None and p.fraction == pytest.approx(0.5)]
    assert halfway and all(math.isfinite(p.val_loss) for p in halfway)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_every_evaluator_stops_when_the_callback_says_so(
    kind: str, corpus_dir: Path, single_thread: None
) -> None:
    def stop_at_the_first_loss(p: Progress) -> bool:
        return p.val_loss is not None

    evaluator = _built(kind, corpus_dir)
    result = evaluator.evaluate(ARCH, Budget("steps", 4), stop_at_the_first_loss, eval_at=(0.5,))
    assert result.stopped_early and result.stopped_at == pytest.approx(0.5)
    assert math.isfinite(result.val_loss)


@pytest.mark.parametrize("kind", KINDS)
def test_every_evaluator_refuses_a_malformed_name_listing_the_valid_ones(kind: str) -> None:
    with pytest.raises(ConfigError) as err:
        registry.check(f"{kind}:\x00?")
    assert "valid:" in str(err.value) and "\n" not in str(err.value)
