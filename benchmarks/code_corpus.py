#!/usr/bin/env python
"""A text corpus of Python source that any machine with Python and torch has, without the network.

The device machine reaches no package index and a call carries at most 64 MiB, so a corpus of 50
million tokens or more cannot travel with it; but every machine that runs this tool holds the source
of Python's standard library and of torch (about 30 and 45 MB here), and of the packages torch
brings (sympy, numpy).  This writes those sources as a text-corpus directory, one document per
source directory (its ``.py`` files in name order, each after a ``# file: PATH`` line), so the
byte-level corpus has one token per byte: ``--data OUT`` then trains on it (documents held out for
validation by the usual rule, docs/data.md).  The corpus is the same wherever the same versions are
installed; its fingerprint, which every run records, tells two apart.

    python benchmarks/code_corpus.py /tmp/code_corpus            # stdlib, torch, numpy, sympy
    python benchmarks/code_corpus.py OUT --packages torch --min-bytes 5e7

Refuses (exit 2, nothing written) when the sources found are under ``--min-bytes`` or OUT exists and
is not empty.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from collections import defaultdict
from importlib import util
from pathlib import Path

DEFAULT_PACKAGES = "torch,numpy,sympy"


def roots(packages: list[str]) -> list[tuple[str, Path]]:
    """(name, directory) of the standard library and of each importable package (a missing one is
    left out: the sizes say what was found)."""
    out = [("stdlib", Path(sysconfig.get_paths()["stdlib"]))]
    for name in packages:
        spec = util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            out.append((name, Path(next(iter(spec.submodule_search_locations)))))
    return out


def documents(name: str, root: Path) -> dict[str, list[Path]]:
    """The ``.py`` files under ``root`` by directory (site-packages and caches left out)."""
    by_dir: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if {"site-packages", "dist-packages", "__pycache__"} & set(rel.parts) or not path.is_file():
            continue
        by_dir[f"{name}/{rel.parent.as_posix()}"].append(path)
    return by_dir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="the corpus directory to write (absent or empty)")
    p.add_argument(
        "--packages", default=DEFAULT_PACKAGES, help=f"besides the stdlib (default {DEFAULT_PACKAGES})"
    )
    p.add_argument(
        "--min-bytes", type=float, default=5e7, help="refuse a corpus smaller than this (default 5e7)"
    )
    args = p.parse_args(argv)
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        print(f"error: {args.out}: exists and is not an empty directory; give a new one", file=sys.stderr)
        return 2
    docs: dict[str, list[Path]] = {}
    sizes: dict[str, int] = {}
    for name, root in roots([n.strip() for n in args.packages.split(",") if n.strip()]):
        found = documents(name, root)
        docs.update(found)
        sizes[name] = sum(f.stat().st_size for files in found.values() for f in files)
    total = sum(sizes.values())
    said = ", ".join(f"{n} {b / 1e6:.1f} MB" for n, b in sizes.items())
    if total < args.min_bytes:
        print(f"error: the sources found are {total / 1e6:.1f} MB ({said}), under --min-bytes "
              f"{args.min_bytes:g}; add --packages", file=sys.stderr)  # fmt: skip
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for key, files in sorted(docs.items()):
        target = args.out / f"{key.replace('/', '__')}.txt"
        with target.open("wb") as fh:
            for f in files:
                data = f.read_bytes().replace(b"\0", b"")  # NUL separates documents
                fh.write(f"# file: {key}/{f.name}\n".encode() + data + b"\n")
    print(f"{args.out}: {len(docs):,} documents, {total / 1e6:.1f} MB ({said}): about {total / 1e6:.0f}M "
          "byte-level tokens")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
