"""What every evaluator returns: one typed :class:`Result`.

The names a search records on each trial come from this dataclass alone:
:data:`METRICS` are the measured numbers, :data:`RUN_FIELDS` say how and where
they were measured.  A result becomes a plain dict (:meth:`Result.to_dict`)
only where it leaves Python objects behind: the Ray worker's reply, the
Optuna user attributes, ``train --json``, a checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch: the read side (best, show) imports this module for its field names
    from nas.models import ArchConfig
    from nas.models.cost import Compute

_METRIC = {"group": "metric"}  # recorded on every trial and shown by `best` / `show`
_RUN = {"group": "run"}  # recorded on every trial: how the metrics were measured


def perplexity(loss: float) -> float:
    """``exp(loss)`` of a loss in nats per token, capped where the exp overflows a float (past ~709): the one
    rule for every perplexity the tool prints or records."""
    return math.exp(min(loss, 700.0))


@dataclasses.dataclass(frozen=True)
class Measure:
    """What a search's recorded value (a trial's ``val_loss``, its first objective) is, by the evaluator that
    scored it: only ``lm``'s is a validation loss in nats per token.  ``probes`` records ``1 - score`` (the
    probe score, a mean accuracy, is what a user reads); a proxy records ``ln`` of its quantity."""

    evaluator: str
    key: str  # its name in JSON outputs and exported files
    column: str  # a table's column header
    name: str  # in words, for headings and messages
    better: str  # "lowest" or "highest" of what :meth:`shown` gives

    @property
    def lm(self) -> bool:
        """A language model's loss: its perplexity and bits per byte mean something."""
        return self.evaluator == "lm"

    @property
    def trains(self) -> bool:
        """Whether the evaluator trains anything (a proxy reads the architecture's size alone)."""
        return not self.evaluator.startswith(("proxy", "sleep"))

    @property
    def logs_curves(self) -> bool:
        """Whether a trial writes TensorBoard curves: the probes train models of their own and log none,
        a proxy trains nothing."""
        return not self.evaluator.startswith(("probes", "proxy", "sleep"))

    def shown(self, value: float) -> float:
        """The recorded value as it is reported: the probe score for ``probes``, the value itself else."""
        return 1.0 - value if self.evaluator.startswith("probes") else value


def measure_of(evaluator: str | None) -> Measure:
    """The :class:`Measure` of ``evaluator`` (``lm``, ``probes[:TASKS][@STEPS]``, ``proxy:NAME``,
    ``sleep:S``; another registered evaluator's value is named by the evaluator alone)."""
    ev = str(evaluator or "lm")
    if ev == "lm":
        return Measure(ev, "val_loss", "loss", "val loss", "lowest")
    if ev.startswith("probes"):
        return Measure(ev, "probe_score", "score", "probe score (mean accuracy)", "highest")
    if ev.startswith(("proxy", "sleep")):
        quantity = ev.split(":")[1] if ev.startswith("proxy:") else "params"  # sleep:S: params after a wait
        return Measure(ev, "proxy_value", f"ln {quantity}", f"{ev} value (ln {quantity})", "lowest")
    return Measure(ev, "value", "value", f"{ev} value", "lowest")


def _f(group: dict[str, str], default: Any = dataclasses.MISSING) -> Any:
    return dataclasses.field(default=default, metadata=group)


@dataclasses.dataclass(frozen=True)
class Result:
    """One evaluation of one architecture.

    A proxy evaluator fills the training fields with zeros (and ``extra`` with
    its name and raw score); the LM trainer fills them all.  ``val_bpb`` is None
    when the corpus does not say how many bytes a token stands for.
    """

    val_loss: float = _f(_METRIC)  # nats per token on the fixed validation slice, at the end or where stopped
    val_ppl: float = _f(_METRIC)
    val_bpb: float | None = _f(_METRIC)
    params: int = _f(_METRIC)
    non_embedding_params: int = _f(_METRIC)
    flops_per_token: float = _f(_METRIC)  # forward, analytic (nas.compute) at the training sequence length
    train_flops_per_token: float = _f(_METRIC)
    train_flops: float = _f(_METRIC, 0.0)  # spent: the run's steps and its rungs' cooldowns (rung_flops)
    #: what one sequence keeps while generating at the training length, float32 (nas.compute: KV caches,
    #: windows, recurrent states)
    state_bytes: int = _f(_METRIC, 0)
    tokens: int = _f(_METRIC, 0)
    steps: int = _f(_METRIC, 0)
    tokens_per_s: float = _f(_METRIC, 0.0)  # training throughput: evaluation and compilation excluded
    seconds: float = _f(_METRIC, 0.0)  # wall clock of the whole evaluation
    arch_id: str = ""
    device: str = _f(_RUN, "none")  # cpu, cuda; none for a proxy
    threads: int | None = _f(_RUN, None)  # torch CPU threads (CPU sums depend on them)
    device_name: str | None = _f(_RUN, None)
    dtype: str | None = _f(_RUN, None)  # what the forward pass computes in: bfloat16 (CUDA autocast), float32
    peak_memory_bytes: int | None = _f(_RUN, None)  # CUDA only: torch.cuda.max_memory_allocated
    compile_seconds: float | None = _f(_RUN, None)  # torch.compile plus the first (compiling) step
    compile_error: str | None = _f(_RUN, None)  # why compiling failed and training ran eager
    vocab_size: int | None = _f(_RUN, None)
    #: {name, base_width, base_depth, width_mult, depth_mult}: the recipe's parametrization and the base
    #: shape its multipliers are relative to (nas.models.parametrization); None: a proxy's, or no model
    parametrization: Mapping[str, Any] | None = _f(_RUN, None)
    #: seq2seq only: greedy decodings of the first validation pairs, [{"source", "target", "output"}]
    samples: list[dict[str, str]] | None = _f(_RUN, None)
    train_seconds: float | None = None  # the training clock: evaluation and compilation excluded
    train_loss: float | None = None  # mean over the last logging window
    seed: int | None = None
    budget: Mapping[str, float] | None = None
    corpus: str | None = None
    intermediate: Mapping[float, float] = dataclasses.field(default_factory=dict)  # {fraction: val_loss}
    #: wsd rungs: [{fraction, steps, tokens, flops, val_loss, cooldown_steps, cooldown_flops, seconds}];
    #: tokens/flops are an independent run's to that rung, cooldown_flops what its branch spent
    rungs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    rung_flops: float = 0.0  # spent on the rungs' cooldowns; part of train_flops
    stopped_early: bool = False
    stopped_at: float | None = None  # fraction of the budget where the callback stopped it
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # evaluator-specific keys

    @classmethod
    def measured(
        cls,
        arch: ArchConfig,
        cost: Compute,
        val_loss: float,
        *,
        bytes_per_token: float | None = 1.0,
        **fields: Any,
    ) -> Result:
        """The result of ``arch`` (whose ``cost`` is known) scoring ``val_loss``: the one place that
        derives perplexity, bits per byte and the size and FLOP columns."""
        return cls(
            val_loss=val_loss,
            val_ppl=perplexity(val_loss),
            val_bpb=None if bytes_per_token is None else val_loss / math.log(2.0) / bytes_per_token,
            params=cost.params,
            non_embedding_params=cost.non_embedding_params,
            flops_per_token=cost.fwd_flops_per_token,
            train_flops_per_token=cost.train_flops_per_token,
            state_bytes=cost.state_bytes,
            arch_id=arch.arch_id,
            vocab_size=arch.vocab_size,
            **fields,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (shallow: ``intermediate`` keeps its float keys), ``extra`` merged in last."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out["intermediate"] = dict(self.intermediate)
        out["rungs"] = [dict(r) for r in self.rungs]
        out.update(self.extra)
        return out


def sample_lines(samples: Any) -> list[str]:
    """A seq2seq result's greedy decodings as text lines (``train`` and ``show`` print them)."""
    if not isinstance(samples, list) or not samples:
        return []
    lines = ["", "greedy decoding of the first validation pairs:"]
    for s in samples:
        if isinstance(s, Mapping):
            lines += [f"  {key:<6}  {s.get(key)}" for key in ("source", "target", "output")]
    return lines


def _group(name: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Result) if f.metadata.get("group") == name)


#: The measured numbers of a result, in display order.
METRICS = _group("metric")
#: How and where they were measured (device, threads, dtype, memory, compilation, vocabulary).
RUN_FIELDS = _group("run")
