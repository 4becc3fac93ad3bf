"""Fixed Random Synthesizer (Tay et al., 2021, "Synthesizer", section 3.2).

As ``synth_random``, but R is a buffer drawn at construction and never trained
(it is saved with the weights, so a reloaded model attends the same way).
"""

from __future__ import annotations

from nas.models.attention.base import ATTENTION
from nas.models.attention.synth_random import RandomSynthesizer


@ATTENTION.register("synth_fixed_random")
class FixedRandomSynthesizer(RandomSynthesizer):
    bidirectional = True  # the random synthesizer's forward, with its matrix frozen
    has_dot_terms = False
    trainable_logits = False
