"""The hurdle check a worker runs while a candidate trains (no Optuna, no search here).

The search (``nas.search.samplers.hurdles``) decides where the hurdles stand and how
high; it sends the worker ``{fraction key: loss threshold}``.  The worker only
needs to name a fraction the way the driver does and to compare a loss with its
threshold, so that much lives here, below both the search and the workers.
"""

from __future__ import annotations

from collections.abc import Mapping


def fraction_key(fraction: float) -> str:
    """A budget fraction as a key (``0.25`` -> ``"0.25"``) of thresholds and user attributes."""
    return f"{fraction:g}"


def missed(thresholds: Mapping[str, float], fraction: float, loss: float) -> bool:
    """True when ``loss`` at ``fraction`` is above that hurdle's threshold."""
    limit = thresholds.get(fraction_key(fraction))
    return limit is not None and loss > limit
