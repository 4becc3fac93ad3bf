"""The program's name, as hints that name a command to run next print it.

A leaf module (it imports nothing of the project), so that library code can name
the program without importing :mod:`nas.cli`, the entry point that imports every
command and through them the rest of the package.
"""

from __future__ import annotations

import os
import sys


def prog_name() -> str:
    """The command the user ran, as hints should print it: ``python run_search.py`` (a script, by its
    file name), ``python -m nas.cli``, else ``nas`` (the console script; also when called from other code)."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main_spec is not None and main_spec.name == "nas.cli":  # nas.cli may be __main__ itself
        return "python -m nas.cli"
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if script.endswith(".py") and script != "__main__.py":  # python -m SOMETHING_ELSE runs a __main__.py
        return f"python {script}"
    return "nas"
