"""The read side (best, show, plot, export): finding a study, leaderboards, one trial in full. No torch."""
