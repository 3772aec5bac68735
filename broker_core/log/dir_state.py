"""Which of a broker's log directories are online: the offline-directory state machine (KIP-112).

A directory starts ONLINE. The first I/O error on anything in it (an append, a follower's
append, a read, a flush, a roll, a checkpoint: any ``OSError``, its subclasses included) makes
it OFFLINE, and it stays OFFLINE until the broker restarts: Kafka's rule, because a disk that
failed once cannot be trusted with a write again, and a half-written file is only safe to look
at again through recovery at the next start.

Sans-IO: this module only records states and tells its listeners; what going offline means for
the partitions in the directory (stop serving them, tell the controller) is the replica
manager's job, and closing the files the log manager's.

Invariant: ``online() + offline()`` are the configured directories, each exactly once; a
directory's state only ever goes ONLINE -> OFFLINE, and each listener hears of it once.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class DirState(Enum):
    ONLINE = "online"
    OFFLINE = "offline"


@dataclass(frozen=True, slots=True)
class DirStatus:
    """One directory's state; for an offline one, why (the error as text) and since when (ms)."""

    path: Path
    state: DirState = DirState.ONLINE
    error: str | None = None
    offline_since_ms: int | None = None


def describe_io_error(error: BaseException) -> str:
    """An I/O error as one line for logs and the directory's status: the errno's symbolic name
    when there is one (``ENOSPC: No space left on device``), else the exception's text."""
    if isinstance(error, OSError) and error.errno is not None:
        name = errno.errorcode.get(error.errno, str(error.errno))
        text = error.strerror or os.strerror(error.errno)
        where = f" ({error.filename})" if error.filename else ""
        return f"{name}: {text}{where}"
    return f"{type(error).__name__}: {error}"


class LogDirStates:
    """The state of every directory of ``log.dirs`` (see the module docstring)."""

    def __init__(self, dirs: Sequence[Path], *, time_ms: Callable[[], int]) -> None:
        if not dirs:
            raise ValueError("at least one log directory is needed")
        self._status: dict[Path, DirStatus] = {Path(d): DirStatus(Path(d)) for d in dirs}
        if len(self._status) != len(dirs):
            raise ValueError(f"log directories named twice: {[str(d) for d in dirs]}")
        self._time_ms = time_ms
        self._listeners: list[Callable[[DirStatus], None]] = []

    def add_listener(self, listener: Callable[[DirStatus], None]) -> None:
        """``listener(status)`` is called once for each directory when it goes offline."""
        self._listeners.append(listener)

    @property
    def dirs(self) -> list[Path]:
        return list(self._status)

    def status(self, path: Path) -> DirStatus:
        return self._status[Path(path)]

    def statuses(self) -> list[DirStatus]:
        return list(self._status.values())

    def is_online(self, path: Path) -> bool:
        return self._status[Path(path)].state is DirState.ONLINE

    def online(self) -> list[Path]:
        return [p for p, s in self._status.items() if s.state is DirState.ONLINE]

    def offline(self) -> list[Path]:
        return [p for p, s in self._status.items() if s.state is DirState.OFFLINE]

    def all_offline(self) -> bool:
        return not self.online()

    def fail(self, path: Path, error: BaseException | str) -> bool:
        """Take ``path`` offline because of ``error``. True if it was online (the listeners
        were told); False if it was offline already (nothing changes: the first error is the
        one kept). KeyError for a directory that is not one of ours."""
        path = Path(path)
        current = self._status[path]
        if current.state is DirState.OFFLINE:
            return False
        why = error if isinstance(error, str) else describe_io_error(error)
        status = DirStatus(path, DirState.OFFLINE, why, self._time_ms())
        self._status[path] = status
        for listener in list(self._listeners):
            listener(status)
        return True

    def dir_containing(self, path: Path | str | None) -> Path | None:
        """The configured directory ``path`` lies in (a file named by an ``OSError``), if any."""
        if path is None:
            return None
        p = Path(os.path.abspath(os.fsdecode(path)))
        for d in self._status:
            base = Path(os.path.abspath(d))
            if p == base or base in p.parents:
                return d
        return None


def offline_dir_names(states: Iterable[DirStatus]) -> list[str]:
    """The offline directories' paths as text, in configuration order."""
    return [str(s.path) for s in states if s.state is DirState.OFFLINE]
