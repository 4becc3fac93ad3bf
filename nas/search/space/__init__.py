"""Search spaces: YAML -> validated parameters, Optuna define-by-run sampling, caps and the trial payload."""
