"""Attention blocks, one module each: importing this package imports every module in it.

Each block module registers its class with ``@ATTENTION.register("NAME")``, so
a new block is one new file here and nothing else (docs/adding_a_block.md).
Modules that register nothing (``base``, ``options``) are imported too, harmlessly.
"""

from __future__ import annotations

import importlib
import pkgutil

from nas.models.attention.base import ATTENTION, AttentionBlock, BlockOptions, FFNSpec


def discover(package_path: list[str], package: str) -> list[str]:
    """Import every module under ``package_path`` (as ``package.NAME``); returns their names.

    ``pkgutil`` lists the modules in name order, so registration order, and with it
    everything that iterates the registry, does not depend on the file system.
    """
    names = []
    for info in pkgutil.iter_modules(package_path, prefix=f"{package}."):
        importlib.import_module(info.name)
        names.append(info.name)
    return names


discover(__path__, __name__)

__all__ = ["ATTENTION", "AttentionBlock", "BlockOptions", "FFNSpec", "discover"]
