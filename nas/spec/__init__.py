"""The experiment spec: one YAML file is the whole run (see :mod:`nas.spec.spec`).

Torch-free, so the read-only commands and ``nas.errors`` users load it cheaply.
"""

from nas.spec.sections import DataSpec, Resources, SearchSection
from nas.spec.spec import DEFAULT_BUDGET, SPEC_KEYS, Spec, describe, differences, is_mutable
from nas.spec.training import BUDGET_KINDS, Budget, TrainRecipe

__all__ = [
    "BUDGET_KINDS", "DEFAULT_BUDGET", "SPEC_KEYS", "Budget", "DataSpec", "Resources", "SearchSection", "Spec",
    "TrainRecipe", "describe", "differences", "is_mutable",
]  # fmt: skip
