#!/usr/bin/env python
"""Entry point: ``python run_search.py [COMMAND] ...``; see ``--help``."""

import sys

from nas.cli import main

if __name__ == "__main__":
    sys.exit(main())
