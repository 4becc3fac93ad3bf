"""Where studies live: storage URLs, the study records and creation, and the one-driver lease."""
