"""Search: YAML spaces, samplers, hurdles and the ask-and-tell driver."""

from nas.search.evolution import AgingEvolutionSampler
from nas.search.hurdles import Hurdles
from nas.search.space import SearchSpace, load_space, parse_space

__all__ = ["AgingEvolutionSampler", "Hurdles", "SearchSpace", "load_space", "parse_space"]
