"""The files of a saved dataset, and the checks a sweep makes on its save path before it sends.

A dataset at ``PATH`` is ``PATH`` (requests), ``<stem>.attempts.parquet``, ``PATH.json`` (the
sidecar) and, while a sweep writes it or after one crashed, ``PATH.journal``. A writer holds an
exclusive ``flock`` on its journal while it is open, so a reader can tell a sweep still running
(lock held) from one that stopped without finishing (the kernel drops the lock of a killed
process). Without ``fcntl`` (Windows) every journal counts as left by a stopped sweep.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO

from llmlat._notice import and_list

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "attempts_path",
    "check_save_path",
    "dataset_files",
    "journal_in_use",
    "journal_path",
    "lock_journal",
    "sidecar_path",
]


def sidecar_path(path: Path) -> Path:
    """Return the JSON sidecar's path of the dataset at ``path``."""
    return path.with_name(path.name + ".json")


def journal_path(path: Path) -> Path:
    """Return the journal's path of the dataset at ``path``."""
    return path.with_name(path.name + ".journal")


def attempts_path(path: Path) -> Path:
    """Return the attempts table's path of the dataset at ``path``."""
    stem = path.stem if path.suffix == ".parquet" else path.name
    return path.with_name(stem + ".attempts.parquet")


def dataset_files(path: Path) -> tuple[Path, Path, Path, Path]:
    """Return the journal, requests, sidecar and attempts paths of the dataset at ``path``."""
    return journal_path(path), path, sidecar_path(path), attempts_path(path)


def lock_journal(file: IO[str]) -> bool:
    """Take the writer's lock on an open journal; False when another writer holds it."""
    if fcntl is None:  # pragma: no cover - Windows
        return True
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks (NFS without lockd): go on unlocked
        pass
    return True


def journal_in_use(journal: Path) -> bool:
    """Return whether a live writer (this process or another) holds the journal's lock.

    Parameters
    ----------
    journal : pathlib.Path
        A journal file.

    Returns
    -------
    bool
        False for a journal left by a sweep that crashed, was killed or was aborted.
    """
    if fcntl is None:  # pragma: no cover - Windows
        return False
    try:
        with journal.open("rb") as file:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    except OSError:  # gone, unreadable, or no locks on this file system: not known to be live
        return False
    return False


def _existing(path: Path) -> tuple[str, bool] | None:
    """Describe the dataset or journal at ``path`` and whether a running sweep writes it."""
    journal = journal_path(path)
    if journal.exists():
        if journal_in_use(journal):
            return f"a running sweep is writing {journal}", True
        return (
            f"{journal} holds the rows of a sweep that did not finish "
            f"(`llmlat read {path}` shows them and how to keep them)"
        ), False
    found = [str(p) for p in dataset_files(path)[1:] if p.exists()]
    if not found:
        return None
    # every file of the dataset at once: naming one at a time, a user deleting by hand met
    # three refusals in a row (requests, sidecar, attempts)
    return f"{and_list(found, 's')} exist{'s' * (len(found) == 1)}", False


def check_save_path(path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Check that a sweep can save at ``path``, before it sends its first request.

    Creates the missing parent folders and writes (then removes) a probe file there, so a
    folder that cannot be written is found now and not when the sweep ends.

    Parameters
    ----------
    path : str or os.PathLike
        The dataset's requests file, e.g. ``"runs/a.parquet"``.
    overwrite : bool, default False
        Allow replacing a dataset or the journal of an unfinished sweep at ``path``. A journal
        that a running sweep is writing is never replaced.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ValueError
        One line starting with ``save:``: the path is a folder, lies under a file, cannot be
        written, or a dataset or journal is there (and ``overwrite`` is False).
    """
    try:
        path = Path(path)
    except TypeError:
        raise ValueError(f"save: expected a file path, got {type(path).__name__}") from None
    if not path.name or path.is_dir():
        example = path / "run.parquet"
        raise ValueError(f"save: {path} is a folder; give a file in it, e.g. {example}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"save: {parent} is a file, so {path} cannot be created under it")
            break
    existing = _existing(path)
    if existing is not None and (existing[1] or not overwrite):
        text, running = existing
        # the CLI and the magic spell option names as flags: "set --overwrite" there
        how = "" if running else "; set overwrite to replace it"
        raise ValueError(f"save: {text}{how}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(f"save: cannot write in {path.parent} ({reason})") from None
    return path
