"""Search: YAML spaces, samplers, hurdles and the ask-and-tell driver."""
