"""Reading a file that holds a secret (a password, a credential line) safely.

Every secret the broker reads from disk goes through :func:`read_secret_file`, so each one is
refused the same way: missing, unreadable, too large, empty, or open to other users. A secret
file that other accounts on the machine can read is a secret shared with them, so the broker
refuses to start rather than use it (as ``ssh`` refuses a private key with loose modes).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: No secret file the broker reads is more than a few lines; a bigger one is a wrong path.
MAX_SECRET_FILE_BYTES = 64 * 1024


class SecretFileError(ValueError):
    """The file cannot be used as a secret; the message names the file and says why."""


def read_secret_file(path: str | os.PathLike[str], what: str) -> str:
    """The text of ``path`` (UTF-8). ``what`` names the file's job in messages (e.g.
    ``"zookeeper.auth.file"``). Raises :class:`SecretFileError` if the file is missing, not a
    regular file, larger than :data:`MAX_SECRET_FILE_BYTES`, not UTF-8, or gives any
    permission to other users (mode ``o+rwx``) or write permission to its group."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise SecretFileError(f"{what} {str(p)!r} does not exist") from None
    except OSError as e:
        raise SecretFileError(f"{what} {str(p)!r} cannot be read: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SecretFileError(f"{what} {str(p)!r} is not a regular file")
    if st.st_mode & (stat.S_IRWXO | stat.S_IWGRP):
        raise SecretFileError(
            f"{what} {str(p)!r} is accessible by other users (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); make it private: chmod 600 {p}")
    if st.st_size > MAX_SECRET_FILE_BYTES:
        raise SecretFileError(f"{what} {str(p)!r} is {st.st_size} bytes, more than a secret "
                              f"file holds ({MAX_SECRET_FILE_BYTES}); is it the right file?")
    try:
        return p.read_bytes().decode("utf-8")
    except OSError as e:
        raise SecretFileError(f"{what} {str(p)!r} cannot be read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise SecretFileError(f"{what} {str(p)!r} is not UTF-8 text") from None
