"""The one check for numbers a user gives, and the ceilings no input may pass.

Every parser of user input (architecture files, search spaces, recipes,
budgets, block options, flags) checks a number through :func:`check_number`,
so a value that is not a number, not finite (``.nan``, ``.inf``, ``1.0e999``),
or outside what the library it is passed to accepts is refused the same way
everywhere: a :class:`~nas.errors.ConfigError` naming the field and the range.

The ceilings below are limits of the libraries and of one machine, not taste;
each says why.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import reprlib
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from nas.errors import ConfigError, UserError

#: NumPy seeds (and through them the samplers) must be below 2**32; torch takes more but we keep one rule
MAX_SEED = 2**32 - 1
#: torch.set_num_threads takes an int; far more threads than any machine has cores is a typo, not a plan
MAX_THREADS = 4096
#: the largest float32: the optimizer's factors (lr, weight decay, clipping norm) are applied in fp32
FP32_MAX = 3.4028234663852886e38
#: threading refuses a timeout above threading.TIMEOUT_MAX (about 9.2e9 s on Linux); 10**9 s is 31 years
MAX_SECONDS = 10**9
#: every layer is a Python module: building 10**5 of them takes minutes before a step runs, and the
#: deepest Transformers trained (DeepNet) have 1000 layers
MAX_LAYERS = 4096
#: one size (d_model, max_len, vocab_size, batch_size...) above 2**31 cannot index a torch tensor dimension
#: on every backend and is far past any model that fits :data:`MAX_TRAIN_BYTES`
MAX_DIM = 2**31 - 1
#: A lower bound of what training one model needs (see ``nas.models.cost.training_bytes``) may not exceed
#: this: 4 TiB is more memory than any single machine or GPU this trainer runs on (one device, no
#: sharding: an 8 x H200 node has 1.1 TiB of GPU memory), so a model over it cannot be trained here;
#: 10**12 parameters alone need 16 TB for fp32 weights, gradients and AdamW's two moments.
MAX_TRAIN_BYTES = 4 * 2**40


def check_number(
    value: Any,
    where: str,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> Any:
    """``value`` if it is a finite number (an int when ``integer``) in the range; else a ConfigError.

    ``low``/``high`` are inclusive unless ``low_open``/``high_open``.  Booleans are not numbers
    (YAML's ``yes`` is one).  The error names ``where`` and the valid range.
    """
    ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        raise ConfigError(
            f"must be {describe_range(integer, low, high, low_open, high_open)}, got {short_repr(value)}",
            where,
        )
    return value


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 2, 4, 4
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 40


def short_repr(value: Any) -> str:
    """``repr(value)`` cut short: a value from a file may be a list of a million items."""
    return _SHORT.repr(value)


def describe_range(
    integer: bool, low: float | None, high: float | None, low_open: bool = False, high_open: bool = False
) -> str:
    """``an integer in [1, 4096]``, ``a positive number``... as error messages say it."""
    if high is None and low == (1 if integer and not low_open else 0) and (integer or low_open):
        return "a positive integer" if integer else "a positive number"
    kind = "an integer" if integer else "a finite number"
    if high == FP32_MAX and not high_open and low is not None:  # float32's largest: a limit nobody writes
        lower = describe_range(integer, low, None, low_open)
        return f"{lower} (at most {FP32_MAX:.4g}, float32's largest)"
    if low is not None and high is not None:
        return f"{kind} in {'(' if low_open else '['}{_num(low)}, {_num(high)}{')' if high_open else ']'}"
    if low is not None:
        return f"{kind} {'>' if low_open else '>='} {_num(low)}"
    if high is not None:
        return f"{kind} {'<' if high_open else '<='} {_num(high)}"
    return kind


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def non_finite_path(doc: Any, path: str = "") -> str | None:
    """The dotted path of the first non-finite float anywhere in plain data, or None.

    Shared containers (YAML aliases) are visited once, so this is linear in the
    document as written, not as expanded.
    """
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(path, doc)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return where or "(top level)"
        if isinstance(node, (dict, list, tuple)):
            if id(node) in seen:
                continue
            seen.add(id(node))
            items = node.items() if isinstance(node, dict) else enumerate(node)
            children = [(f"{where}.{k}" if where else str(k), v) for k, v in items]
            stack.extend(reversed(children))
    return None


def finite_or_none(value: Any, key: Any = None) -> Any:
    """Plain data with every non-finite float as None (a metric that was not measured), for JSON and YAML.

    ``key`` maps mapping keys (``str`` for JSON); None keeps them.
    """
    if isinstance(value, dict):
        return {(key(k) if key else k): finite_or_none(v, key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v, key) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def yaml_number(value: Any, *, keep_non_finite: bool = False) -> Any:
    """YAML 1.1 reads 1e12 (no dot, no exponent sign) as a string: the number it means; any other
    value as it is (``keep_non_finite``: "inf" and "nan" stay strings, for checks that refuse text)."""
    if not isinstance(value, str):
        return value
    try:
        number = float(value)
    except ValueError:
        return value
    return value if keep_non_finite and not math.isfinite(number) else number


def utf16_text(data: bytes) -> str | None:
    """Why ``data`` is unreadable as a UTF-8 text file when it is UTF-16 text (Windows' "Unicode" saving:
    a byte-order mark, a NUL in every other byte), else None.  Every reader (a corpus, a YAML file)
    wants UTF-8; such a file was called binary or undecodable, with no word of the fix."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16 text, by its byte-order mark; save it as UTF-8"
    return None


def not_a_file(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file (None: it is a regular file).  A directory or a FIFO was
    called missing, or silently skipped, by readers that asked ``is_file()`` alone."""
    if path.is_file():
        return None
    if path.is_dir():
        return "is a directory, not a file"
    return "is not a regular file" if path.exists() else "missing"


def utf8_text(data: bytes) -> tuple[str, None] | tuple[None, str]:
    """``data`` decoded as UTF-8 text (a UTF-8 byte-order mark dropped, as Windows' Notepad writes one),
    or None and why it is not UTF-8 text: UTF-16, or the first invalid byte by line and column."""
    wide = utf16_text(data)
    if wide:
        return None, wide
    body = data[len(codecs.BOM_UTF8) :] if data.startswith(codecs.BOM_UTF8) else data
    try:
        return body.decode("utf-8"), None
    except UnicodeDecodeError as err:
        line = body.count(b"\n", 0, err.start) + 1
        column = err.start - (body.rfind(b"\n", 0, err.start) + 1) + 1
        return None, f"not UTF-8 text (byte 0x{body[err.start]:02x} at line {line}, column {column})"


def read_text_file(path: str | os.PathLike[str], valid: str, shown: str | None = None) -> tuple[str, bytes]:
    """The UTF-8 text of the file ``path`` and its bytes, or one :class:`UserError` line
    ``"{shown}: {what is wrong}; {valid}"`` (``shown``: the file as the message names it, by default its
    path): missing, a directory or FIFO, unreadable, UTF-16, not UTF-8, or empty."""
    p = Path(path)
    name = str(p) if shown is None else shown

    def refuse(problem: str) -> NoReturn:
        raise UserError(f"{name}: {problem}; {valid}")

    problem = not_a_file(p)
    if problem:
        refuse(problem)
    try:
        data = p.read_bytes()
    except OSError as err:
        refuse(f"cannot read it ({err.strerror or err})")
    text, problem = utf8_text(data)
    if text is None:
        refuse(str(problem))
    if not text.strip():
        refuse("is empty")
    return text, data


def read_json_file(path: str | os.PathLike[str], valid: str, shown: str | None = None) -> Any:
    """The JSON document in the file ``path``; every problem (those of :func:`read_text_file`, JSON that
    does not parse, or nesting too deep for Python's parser) one :class:`UserError` line as it words them."""
    text, _ = read_text_file(path, valid, shown)
    name = str(path) if shown is None else shown
    try:
        return json.loads(text)
    except RecursionError:  # json's parser recurses per level: a few thousand [ raised it
        raise UserError(f"{name}: nested too deeply to be read; {valid}") from None
    except ValueError as err:
        raise UserError(f"{name}: not valid JSON ({err}); {valid}") from None


def check_writable_dir(path: str | os.PathLike[str], what: str, *, given: str | None = None) -> None:
    """Refuse ``path`` unless it is, or can be created as, a writable directory; leaves nothing behind.
    ``given``: the path the user typed when ``path`` is derived from it (a file's directory), so the
    error quotes what they wrote.

    The nearest existing ancestor must be a directory that a file can really be created in:
    ``os.access`` alone says yes to root on a read-only mount point such as ``/proc``.
    """
    if not str(path).strip():
        raise UserError(f"{what} is empty; give a directory")
    p = Path(path).expanduser()
    shown = f"{what} {str(path if given is None else given)!r}"
    for link in (p, *p.parents):  # a link to nothing: mkdir would fail later, after the work
        if link.is_symlink() and not link.exists():
            target = os.readlink(link)
            raise UserError(f"{shown}: {link} is a link to {target!r}, which does not exist")
    probe = p
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{shown}: {probe} is not a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".nas-write-test-", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as err:
        raise UserError(f"{shown}: cannot write in {probe} ({err.strerror or err})") from None


def check_file_name(path: str | os.PathLike[str], what: str, example: str | None = "out") -> Path:
    """Refuse a path that cannot name an output file (empty, a link to nothing, a directory, a device);
    returns it as a Path.  ``example``: a file name to suggest inside a directory given instead of a
    file (None: the command chose the name, as ``plot`` does).  Pass ``path`` as the user typed it:
    ``Path`` drops the trailing slash that says "a directory"."""
    if not str(path).strip():
        raise UserError(f"{what} is empty; give a file name")
    p = Path(path).expanduser()
    shown = f"{what} {str(path)!r}"
    if p.is_symlink() and not p.exists():
        raise UserError(f"{shown}: is a link to {os.readlink(p)!r}, which does not exist; give a file name")
    if p.is_dir() or str(path).endswith(os.sep):
        if example is None:  # a name the command chose (plot's pareto.png): the user cannot rename it
            raise UserError(
                f"{shown}: is a directory where this command writes a file; move it away or "
                f"choose another {what}"
            )
        raise UserError(f"{shown}: is a directory; give a file name such as {p / example}")
    if p.exists() and not p.is_file():  # writers replace the path: a device (/dev/null) would be replaced too
        raise UserError(
            f"{shown}: exists and is not a regular file (a device, a pipe or a socket); "
            "give the name of a file"
        )
    return p


def check_output_file(path: str | os.PathLike[str], what: str, *, example: str = "out") -> None:
    """Refuse a file path a command will write (and may replace), before it does any work (creates
    nothing).  A command's user-facing outputs go through :func:`nas.files.outputs.plan_output` instead."""
    p = check_file_name(path, what, example)
    if p.exists() and not os.access(p, os.W_OK):
        raise UserError(f"{what} {str(path)!r}: the file exists and is not writable")
    check_writable_dir(p.parent, what, given=str(path))


#: a study name becomes a directory under --runs-dir and a word in printed commands
MAX_NAME = 128


def check_study_name(name: Any, where: str) -> str:
    """``name`` if it can name a study; else a ConfigError at ``where`` that states the whole rule."""
    ok = (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NAME
        and (name[0].isalnum() or name[0] == "_")
        and all(c.isalnum() or c in "._-" for c in name)
    )
    if not ok:
        raise ConfigError(
            f"{name!r} cannot name a study: use 1 to {MAX_NAME} letters, digits, '.', '-' or "
            "'_', starting with a letter, a digit or '_'",
            where,
        )
    return name
