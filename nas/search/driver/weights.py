"""A search that keeps its best models: ``resources.keep_weights: K``.

A worker that finished a trial holds the trained model as safetensors checkpoint
bytes (the format of ``train --save X.safetensors``: :func:`nas.files.checkpoint.checkpoint_bytes`);
the pool hands the driver a call that fetches them (:class:`nas.execution.pool.Finished`
``weights``: on Ray, the actor's second return value, an object ref owned by the
driver, so nothing crosses the network until it is asked for and the driver needs
no shared file system with the workers).  Before the trial is told, :meth:`KeptWeights.offer`
decides whether it is among the kept; only then are the bytes fetched and written
to ``RUNS_DIR/STUDY/weights/trial_N.safetensors`` (a temporary file renamed into place,
by :mod:`nas.files.outputs`), and the trial records where they are and their SHA-256 (user
attribute :data:`~nas.search.storage.records.WEIGHTS`).  After the tell, the files of
trials that dropped out are deleted, each only if it is still the file the search
wrote (its SHA-256 matches the record).

Which trials are kept (the rule ``docs/export.md`` states): walk the study's ranking,
the one ``best`` prints (lowest loss first; with several objectives only the trials on
the Pareto front, lowest loss first), and keep the first K whose weights the search
holds (kept earlier, or the trial just finished).  So the best trial of a study that kept
weights from its start is always kept, and a trial left out when it finished can never
come back (later trials only raise the bar), which is why the bytes of the others are
never fetched.

Optuna's Pareto-front helpers are private, and ``study.best_trials`` sees a trial only once
it is told, which is too late to record the file on it (a finished trial's attributes are
frozen); hence the small domination test here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from nas.errors import UserError
from nas.files.outputs import plan_output, sha256_file, write_output, written_here
from nas.search.storage.records import WEIGHTS, is_infeasible, trained
from nas.spec.sections import named

Line = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Kept:
    """One trial whose checkpoint the search holds."""

    number: int
    values: tuple[float, ...]
    path: Path
    sha256: str
    size: int


@dataclasses.dataclass(frozen=True)
class Admission:
    """A trial whose weights were just written; ``dropped``: the kept trials it pushes out once told."""

    number: int
    dropped: tuple[int, ...]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` is no worse than ``b`` in every objective and better in one (every objective minimised)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


def choose(available: Mapping[int, Sequence[float]], every: Sequence[Sequence[float]], k: int) -> list[int]:
    """The trials (of ``available``: number -> objective values) whose weights are kept, best first.

    ``every``: the values of every trained trial of the study (``available``'s included).  One
    objective: the ``k`` lowest losses.  Several: those no trial of ``every`` dominates (the Pareto
    front), lowest loss first, at most ``k``.  Ties go to the earlier trial.
    """
    eligible = [
        n for n, v in available.items() if len(v) == 1 or not any(dominates(other, v) for other in every)
    ]
    return sorted(eligible, key=lambda n: (available[n][0], n))[:k]


def record_of(t: FrozenTrial) -> dict[str, Any] | None:
    """The trial's record of its kept weights (file, sha256, bytes), None when it has none."""
    rec = t.user_attrs.get(WEIGHTS)
    return rec if isinstance(rec, dict) and rec.get("file") and rec.get("sha256") else None


def kept_file(
    rec: Mapping[str, Any], directory: str | os.PathLike[str] | None, *, recorded: bool = True
) -> Path:
    """Where a trial's kept weights are: the file of the recorded name in ``directory`` (the study's
    weights directory under the runs directory this command was given), else, with ``recorded``, the
    path recorded when it was written (a reader given another working directory).

    The search itself passes ``recorded=False``: a search continued in a copy of a runs directory
    finds the copy's files, never the original's by their recorded absolute path (it would count
    them as its own and delete them as they drop out, in a directory it was never given).
    """
    path = Path(str(rec["file"]))
    if directory is not None:
        here = Path(directory) / path.name
        if here.is_file() or not recorded:
            return here
    return path


def inside(path: Path, directory: Path) -> bool:
    """``path`` lies in ``directory`` itself (links resolved): where a search may delete what it wrote."""
    try:
        return path.resolve().parent == directory.resolve()
    except OSError:
        return False


class KeptWeights:
    """The checkpoints one search run keeps: see the module docstring."""

    def __init__(self, k: int, directory: str | os.PathLike[str] | None) -> None:
        self.k = int(k)
        self.dir = Path(directory) if directory is not None else None
        self.kept: dict[int, Kept] = {}
        # what this run did, for the summary: fetched from workers (bytes, seconds), written, deleted
        self.fetched = 0
        self.fetched_bytes = 0
        self.fetch_seconds = 0.0
        self.write_seconds = 0.0
        self.deleted = 0

    @property
    def active(self) -> bool:
        """Whether this run keeps weights (K > 0 and a directory to keep them in)."""
        return self.k > 0 and self.dir is not None

    # -- before the search starts -------------------------------------------------------------
    def check_files(self, study: optuna.Study | None) -> None:
        """Refuse, before anything is made, a weights directory holding trial files no trial of
        ``study`` (None: a new study) wrote: a study of this name deleted earlier left them, and
        this search would otherwise write its own trials' weights over them."""
        if not self.active or self.dir is None or not self.dir.is_dir():
            return
        ours = set()
        for t in study.get_trials(deepcopy=False) if study is not None else ():
            rec = record_of(t)
            if rec is not None:
                ours.add(Path(str(rec["file"])).name)
        stray = sorted(p.name for p in self.dir.glob("trial_*.safetensors") if p.name not in ours)
        if stray:
            more = f" and {len(stray) - 1} more" if len(stray) > 1 else ""
            raise UserError(
                f"{named('resources', 'keep_weights')}: {self.dir} holds {stray[0]}{more}, which no trial of "
                "this study wrote (left by a deleted study of the same name?); move them away, or give "
                "another --runs-dir or --study"
            )

    def load(self, study: optuna.Study, line: Line) -> None:
        """The weights earlier runs of ``study`` kept (files still there, of the recorded size); with
        K > 0, also delete what a stopped driver wrote for a trial it never told, and what is past the
        best K now (K may have changed).  With K = 0 nothing is deleted."""
        missing: dict[int, tuple[float, ...]] = {}
        for t in study.get_trials(deepcopy=False):
            rec = record_of(t)
            if rec is None:
                continue
            path = kept_file(rec, self.dir, recorded=False)
            if t.state == TrialState.COMPLETE and not is_infeasible(t):
                if path.is_file() and path.stat().st_size == rec.get("bytes"):
                    self.kept[t.number] = Kept(
                        t.number, tuple(t.values), path, str(rec["sha256"]), path.stat().st_size
                    )
                else:
                    missing[t.number] = tuple(t.values)
            elif self.active and t.state != TrialState.RUNNING:
                self._delete(path, str(rec["sha256"]))  # written, then the driver stopped before the tell
        # a file deleted because its trial dropped out of the best K is no news: only one that would be
        # kept now is said to be missing
        every = [tuple(t.values) for t in trained(study)]
        wanted = set(choose({**{n: k.values for n, k in self.kept.items()}, **missing}, every, self.k))
        missing = {n: v for n, v in missing.items() if n in wanted}
        if missing:
            line(
                f"note: the kept weights of trial(s) {', '.join(map(str, missing))} are missing or changed "
                "since the search wrote them; they no longer count among the kept"
            )
        if self.active and self.kept:
            chosen = set(self._choose(study, None))
            for number in [n for n in self.kept if n not in chosen]:
                self._drop(number, line)

    # -- as trials finish ---------------------------------------------------------------------
    def offer(
        self,
        study: optuna.Study,
        trial: Trial,
        values: Sequence[float],
        fetch: Callable[[], bytes | None] | None,
        line: Line,
    ) -> Admission | None:
        """Keep ``trial``'s weights if it is among the best K (call before telling it ``values``).

        Fetches and writes them, records them on the trial and returns what it pushes out; None when
        it is not kept.  Weights that cannot be fetched (lost with their worker's node) are said in one
        line and not kept.  A file that cannot be written (no room, a file put there meanwhile) raises
        :class:`UserError` with nothing half-written, the trial recording no file.
        """
        if not self.active or fetch is None or self.dir is None:
            return None
        number = trial.number
        chosen = self._choose(study, (number, tuple(values)))
        if number not in chosen:
            return None
        started = time.perf_counter()
        try:
            data = fetch()
        except Exception as err:  # noqa: BLE001 - the pool's error for weights lost with their worker
            line(f"trial {number}: its weights could not be fetched from its worker ({type(err).__name__}); "
                 "not kept")  # fmt: skip
            return None
        finally:
            self.fetch_seconds += time.perf_counter() - started
        if data is None:
            return None
        self.fetched += 1
        self.fetched_bytes += len(data)
        path = self.dir / f"trial_{number}.safetensors"
        sha = hashlib.sha256(data).hexdigest()
        # recorded first: if writing fails there is no file for it, and a file written without a record
        # (a failing storage) would be taken for a stranger's by the next start
        trial.set_user_attr(WEIGHTS, {"file": os.path.abspath(path), "sha256": sha, "bytes": len(data)})
        started = time.perf_counter()
        try:
            planned = plan_output(
                path, named("resources", "keep_weights"), example=None, replace_own=False, kept_weights=True
            )
            write_output(planned, lambda tmp: tmp.write_bytes(data))
        except (UserError, OSError) as err:
            try:
                trial.set_user_attr(WEIGHTS, None)
            except Exception:  # noqa: BLE001 - the storage may be what failed; the record is checked on use
                pass
            if isinstance(err, UserError):
                raise
            raise UserError(f"cannot write {path} ({err.strerror or err}); nothing was written") from None
        finally:
            self.write_seconds += time.perf_counter() - started
        self.kept[number] = Kept(number, tuple(values), path, sha, len(data))
        return Admission(number, tuple(n for n in self.kept if n not in chosen))

    def settle(self, admission: Admission, complete: bool, line: Line) -> None:
        """After the tell: delete the files of the trials ``admission`` pushed out (or its own, when the
        trial was not told COMPLETE after all)."""
        for number in (admission.number,) if not complete else admission.dropped:
            self._drop(number, line)

    # -- the end ------------------------------------------------------------------------------
    def summary(self) -> str | None:
        """One line: how many are kept, their bytes and where; what this run fetched, wrote and deleted."""
        if not self.kept and not self.active:
            return None
        total = sum(k.size for k in self.kept.values())
        order = sorted(self.kept.values(), key=lambda k: (k.values[0], k.number))
        which = f" (trial {', '.join(str(k.number) for k in order)}, best first)" if order else ""
        where = self.dir if self.dir is not None else Path(order[0].path).parent
        text = f"{len(self.kept)} kept{which}: {total:,} bytes in {where}"
        if self.fetched:
            text += (
                f"; this run fetched {self.fetched} from its workers ({self.fetched_bytes:,} bytes, "
                f"{self.fetch_seconds:.3f} s) and wrote them in {self.write_seconds:.3f} s"
            )
        if self.deleted:
            text += f"; deleted {self.deleted} that dropped out of the best {self.k}"
        if not self.active:
            text += f" ({named('resources', 'keep_weights')} 0 in this run: none added)"
        return text

    # -- internals ----------------------------------------------------------------------------
    def _choose(self, study: optuna.Study, new: tuple[int, tuple[float, ...]] | None) -> list[int]:
        every = [tuple(t.values) for t in trained(study)]
        available = {n: k.values for n, k in self.kept.items()}
        if new is not None:
            every.append(new[1])
            available[new[0]] = new[1]
        return choose(available, every, self.k)

    def _drop(self, number: int, line: Line) -> None:
        kept = self.kept.pop(number, None)
        if kept is None:
            return
        left = self._delete(kept.path, kept.sha256)
        if left is None:
            self.deleted += 1
        elif kept.path.exists():
            line(f"note: {kept.path} (trial {number}) dropped out of the best {self.k} and is left as it is: "
                 f"{left}")  # fmt: skip

    def _delete(self, path: Path, sha256: str) -> str | None:
        """Delete ``path`` if this search can show it wrote it there: it lies in the weights directory
        this run was given, holds the bytes the trial recorded (its SHA-256 is ``sha256``), and the
        output rule's record says this tool wrote it at that very path
        (:func:`nas.files.outputs.written_here`: a copied runs directory's files were written elsewhere,
        so a continued copy leaves them).
        Returns None when deleted, else why it was left."""
        if self.dir is None or not inside(path, self.dir):
            return f"it is not in {self.dir}, the weights directory of this run"
        try:
            if not path.is_file() or path.is_symlink():
                return "it is not a plain file"
            if sha256_file(path) != sha256:
                return "it changed since the search wrote it"
            if not written_here(path):
                return "this tool did not write it at this path (a copied runs directory?)"
            path.unlink()
            return None
        except OSError as err:
            return f"it could not be deleted ({err.strerror or err})"
