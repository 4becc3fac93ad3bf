"""Samplers: NSGA-II, aging evolution, hurdles, and the names the CLI accepts."""
