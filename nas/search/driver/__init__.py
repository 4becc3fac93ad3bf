"""The search driver: the ask-and-tell loop, what it keeps of trials in flight, when it stops, what it prints and records."""
