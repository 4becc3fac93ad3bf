"""Capability probes: MAD's six synthetic tasks, scaled down, as an evaluator (``probes``).

Each candidate is trained from scratch once per task, with its own blocks, width, depth, heads,
norm and positions, but the task's vocabulary and length: the architecture is rebuilt with
``vocab_size`` and ``max_len`` replaced (``dataclasses.replace``, so the ArchConfig's checks run
again).  An option that cannot hold at the task's length is refused, not clamped: a
``synth_factorized_dense`` with ``a * b`` below the task's ``max_len`` (possible only when the
file's own max_len is below 64) raises a ConfigError naming the task.  Every other block reads
``max_len`` only to size its tables.

Protocol (settings of :class:`ProbeEvaluator`, defaults in brackets): AdamW (lr [1e-3],
betas 0.9/0.95, no weight decay, gradient clip 1.0), linear warmup over the first 5% of the steps
then constant (no decay: the recall transition comes late, after about 2,100 steps of batch 64
for a 2-layer width-64 mha, and a decay would lower the lr before it), a fixed number of steps
per task [``DEFAULT_STEPS``], batch [32], one seed [0] for the data and the initial weights.
CAVEAT: the default steps fit a minute per task on one CPU thread, and they are far below that
recall transition: at the defaults the recall tasks sit on their plateau (about 0.31, what
guessing a frequent value in context gives) for attention too.  So ``in_context_recall`` and
``noisy_in_context_recall`` are scored above that plateau (``above_plateau`` of the accuracy and
``frequent_value_accuracy``): 0 says the task separated nothing; raise ``steps`` to separate
mixers on recall (docs/probes.md).  Datasets are generated in memory with
``numpy.random.default_rng((seed, task number, split))``: the same seed gives the same data.
Accuracy is the argmax over the whole vocabulary at the scored positions of a held-out test set,
micro-averaged (correct scored positions / scored positions, pooled over all test sequences;
MAD's torchmetrics call may average per class instead).  The score is the unweighted mean of the
task scores (the accuracy; for the two recall tasks above, how far it rose above the plateau), and
``val_loss`` is ``1 - score``: a search that minimises val_loss maximises
the score (``val_ppl`` is exp of it and means nothing; ``val_bpb`` is None).  The search's
budget is ignored (the probe's steps are fixed, so scores compare across trials); ``params``,
FLOPs and state are the architecture's as given (``nas.compute``), not those of the probe models.

The tasks, as implemented, are described in their modules: :mod:`evaluators.probes.recall`
(the three recall tasks), :mod:`~evaluators.probes.copying`, :mod:`~evaluators.probes.compression`
and :mod:`~evaluators.probes.memorization`.

MAD scores each task as the best of an lr x weight-decay sweep averaged over a difficulty sweep;
here there is one setting and one optimizer configuration per task, and far fewer steps.
"""

from __future__ import annotations

from evaluators.probes.base import IGNORE, Instance
from evaluators.probes.compression import BottleneckAutoencoder, compression_instance
from evaluators.probes.copying import selective_copy_instance
from evaluators.probes.memorization import memorization_instance, memorization_map
from evaluators.probes.plateau import above_plateau, frequent_value_accuracy
from evaluators.probes.recall import fuzzy_recall_instance, recall_instance
from evaluators.probes.runner import (
    DEFAULT_BATCH,
    DEFAULT_LR,
    DEFAULT_STEPS,
    MAX_STEPS,
    ProbeEvaluator,
    TaskRun,
    accuracy,
    lr_at,
)
from evaluators.probes.tasks import (
    ENCODER_DECODER,
    TASKS,
    Task,
    input_len,
    make_dataset,
    parse_tasks,
    probe_arch,
)

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_LR",
    "DEFAULT_STEPS",
    "ENCODER_DECODER",
    "IGNORE",
    "MAX_STEPS",
    "TASKS",
    "BottleneckAutoencoder",
    "Instance",
    "ProbeEvaluator",
    "Task",
    "TaskRun",
    "above_plateau",
    "accuracy",
    "compression_instance",
    "frequent_value_accuracy",
    "fuzzy_recall_instance",
    "input_len",
    "lr_at",
    "make_dataset",
    "memorization_instance",
    "memorization_map",
    "parse_tasks",
    "probe_arch",
    "recall_instance",
    "selective_copy_instance",
]
