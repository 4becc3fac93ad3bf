"""Where candidates run.  ``ray_pool`` is the only module in the project that imports Ray."""
