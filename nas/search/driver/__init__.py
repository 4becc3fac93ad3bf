"""The search driver: the ask-and-tell loop, trials in flight, when it stops, what it prints and records."""
