"""Where candidates run.

``worker`` runs one trial (plain dict in, plain dict out); ``ray_pool`` runs
trials on Ray actors and is the only module in the project that imports Ray;
``local_pool`` runs them in the driver's own process (``search --local``);
``chaos`` kills workers at random for reliability tests (docs/reliability.md).
"""
