"""What every probe task shares: the target that is not scored, and the shape of an instance."""

from __future__ import annotations

import numpy as np

IGNORE = -100  # a target that is neither trained nor scored (cross_entropy's default ignore_index)

Instance = tuple[np.ndarray, np.ndarray]  # inputs (T,), targets (T,) with IGNORE where not scored
