"""One-step renames: publish a staged file or directory at its final path.

`renameat2` with `RENAME_NOREPLACE` (a concurrent writer that got there
first is never silently replaced) or `RENAME_EXCHANGE` (an overwrite is
one step: never a moment without the path). Where libc, the kernel or the
filesystem lacks them, the check and a two-rename swap run under an
exclusive `flock` instead. Staging, writer locks and recovery are
`keras_posenc._files.atomic`; this module only renames.
"""

__all__ = [
    "HAVE_RENAMEAT2",
    "RENAME_EXCHANGE",
    "RENAME_NOREPLACE",
    "exchange_supported",
    "exists_error",
    "publish",
    "remove",
    "rename2",
    "identity",
    "same_file",
    "serialized",
]

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from typing import Any

_AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
# What renameat2 answers when libc, the kernel or the filesystem lacks a flag.
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP)
_libc_renameat2: Any  # a ctypes function, or None without renameat2
try:
    _libc_renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    _libc_renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p) * 2 + (ctypes.c_uint,)
except (AttributeError, OSError):  # not Linux, or glibc older than 2.28
    _libc_renameat2 = None


HAVE_RENAMEAT2 = _libc_renameat2 is not None


def exists_error(path):
    return FileExistsError(
        f"Refusing to replace the existing path {path!r}. "
        "Pass overwrite=True (or --overwrite) to replace it."
    )


def rename2(src, dst, flags):
    """`renameat2(src, dst, flags)`; False where the flag is unsupported."""
    if _libc_renameat2 is None:
        return False
    src_bytes, dst_bytes = os.fsencode(src), os.fsencode(dst)
    if _libc_renameat2(_AT_FDCWD, src_bytes, _AT_FDCWD, dst_bytes, flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    if code == errno.EEXIST:
        raise exists_error(dst)
    raise OSError(code, os.strerror(code), dst)


def exchange_supported(directory):
    """Tells whether overwrites in `directory` use `RENAME_EXCHANGE`.

    Args:
        directory: str or os.PathLike. An existing, writable directory.

    Returns:
        True if libc, the kernel and the filesystem support the exchange.
    """
    first = tempfile.mkdtemp(prefix=".exchange-probe-", dir=directory)
    second = tempfile.mkdtemp(prefix=".exchange-probe-", dir=directory)
    try:
        return rename2(first, second, RENAME_EXCHANGE)
    finally:
        os.rmdir(first)
        os.rmdir(second)


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def identity(path):
    """`(st_dev, st_ino)` of what `path` names, or None if nothing."""
    try:
        named = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return named.st_dev, named.st_ino


def same_file(fd, path):
    """Whether `path` still names the file open as `fd`."""
    held = os.fstat(fd)
    return identity(path) == (held.st_dev, held.st_ino)


@contextlib.contextmanager
def serialized(lock):
    """Holds the lock file `lock` exclusively (created if missing) meanwhile.

    Serializes the fallback check-and-rename among the writers of one path.
    The lock file is unlinked by its holder before the lock is released, so
    no file stays behind; a waiter that wakes holding an unlinked file
    starts again on the file `lock` names now.
    """
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if same_file(fd, lock):
            break
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        os.close(fd)


def publish(staging, path, overwrite, refuse, *, lock, kind="directory", old=None):
    """Puts `staging` at `path`, replacing what is there only if `overwrite`.

    `refuse(path)` raises if the content at `path` may not be replaced. A
    directory replaces one with `RENAME_EXCHANGE` (no moment without
    `path`; the old content is left at `staging`), a file with one rename.
    Where `renameat2` lacks a flag, the check and the renames run holding
    the lock file `lock`, an existing directory moving to `old` meanwhile.
    """
    if not _publish_atomically(staging, path, overwrite, refuse, kind):
        with serialized(lock):
            _publish_locked(staging, path, overwrite, refuse, kind, old)


def _publish_atomically(staging, path, overwrite, refuse, kind):
    """One `renameat2` (or `os.replace` for a file); False if unsupported."""
    while True:
        exists = os.path.lexists(path)
        if exists and not overwrite:
            raise exists_error(path)
        if exists:
            refuse(path)
        try:
            if exists and kind == "file":
                os.replace(staging, path)
                return True
            flags = RENAME_EXCHANGE if exists else RENAME_NOREPLACE
            return rename2(staging, path, flags)
        except (FileExistsError, FileNotFoundError):
            # `path` appeared or vanished since it was looked at: a
            # concurrent writer. Look again, unless overwriting was not asked
            # for or the staging is what is missing.
            if not (overwrite and os.path.lexists(staging)):
                raise


def _publish_locked(staging, path, overwrite, refuse, kind, old):
    """The fallback without `renameat2`, run under the publishing lock."""
    if not os.path.lexists(path):
        os.rename(staging, path)
        return
    if not overwrite:
        raise exists_error(path)
    refuse(path)
    if kind == "file":
        os.replace(staging, path)
        return
    os.rename(path, old)
    try:
        os.rename(staging, path)
    except BaseException:
        os.rename(old, path)
        raise
    remove(old)
