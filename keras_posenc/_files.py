"""Atomic, crash-safe publication of exported directories and written files.

Why: content written in place is seen half-done by readers and left half-done
by a kill, and a "rename away, rename in" overwrite leaves no `path` at all if
killed between the two renames. Here content is staged in a hidden sibling and
published with one `renameat2` call: `RENAME_NOREPLACE`, so a concurrent writer
that got there first is never silently replaced, or `RENAME_EXCHANGE`, so an
overwrite is one step. Where those are missing, an exclusive `fcntl` lock and
a two-rename swap stand in. Whatever a killed run leaves behind is restored or
removed by the next run for the same path.
"""

__all__ = [
    "atomic_directory",
    "atomic_file",
    "check_path",
    "exchange_supported",
    "refuse_to_replace",
]

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import tempfile

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
# What renameat2 answers when libc, the kernel or the filesystem lacks a flag.
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP)

try:
    _libc_renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    _libc_renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p) * 2 + (ctypes.c_uint,)
except (AttributeError, OSError):  # not Linux, or glibc older than 2.28
    _libc_renameat2 = None


def check_path(path, name="path"):
    """Checks a path argument, Keras style.

    Args:
        path: str or os.PathLike. The path to check.
        name: str. The argument name for messages. Defaults to `"path"`.

    Returns:
        The absolute path, as a str.

    Raises:
        TypeError: if `path` is not a str or a str-valued os.PathLike.
        ValueError: if `path` is empty.
    """
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text:
        error = ValueError if text == "" else TypeError
        raise error(
            f"Received an invalid value for `{name}`, expected a non-empty str "
            f"or os.PathLike path. Received: {name}={path!r}"
        )
    return os.path.abspath(text)


def _exists_error(path):
    return FileExistsError(
        f"Refusing to replace the existing path {path!r}. "
        "Pass overwrite=True (or --overwrite) to replace it."
    )


def _why_not_replace(path, kind, marker):
    real = os.path.realpath(path)
    if os.path.dirname(real) == real:
        return "it is the root directory"
    if real == os.path.realpath(os.path.expanduser("~")):
        return "it is the home directory"
    with contextlib.suppress(OSError):  # a deleted cwd has no ancestors to protect
        if os.path.commonpath([real, os.path.realpath(os.getcwd())]) == real:
            return "it is the current directory or one of its ancestors"
    if os.path.islink(path):
        return "it is a symlink"
    if os.path.ismount(path):
        return "it is a mount point"
    if kind == "file":
        return None if os.path.isfile(path) else "it is not a regular file"
    if not os.path.isfile(os.path.join(path, marker)):
        what = "a SavedModel" if marker == "saved_model.pb" else "a keras_posenc output"
        return f"it is not {what} directory (no {marker} inside)"
    return None


def refuse_to_replace(path, overwrite, *, kind="directory", marker="saved_model.pb"):
    """Fails early, before any expensive work, if writing `path` is not allowed.

    Args:
        path: str or os.PathLike. The directory or file about to be written.
        overwrite: bool. Whether replacing an existing `path` was asked for.
        kind: `"directory"` or `"file"`. What `path` will be. Defaults to
            `"directory"`.
        marker: str. The file that makes a directory replaceable. Defaults to
            `"saved_model.pb"`.

    Raises:
        FileExistsError: if `path` exists and `overwrite` is false.
        ValueError: if `path` exists, `overwrite` is true, and `path` is `/`,
            the home directory, the current directory or one of its ancestors,
            a symlink, a mount point, a directory without `marker` (for
            `kind="directory"`) or not a regular file (for `kind="file"`).
    """
    path = check_path(path)
    if not os.path.lexists(path):
        return
    if not overwrite:
        raise _exists_error(path)
    reason = _why_not_replace(path, kind, marker)
    if reason:
        raise ValueError(f"Refusing to overwrite {path!r}: {reason}.")


def _rename2(src, dst, flags):
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
        raise _exists_error(dst)
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
        return _rename2(first, second, _RENAME_EXCHANGE)
    finally:
        os.rmdir(first)
        os.rmdir(second)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        pass
    return True


def _sibling(parent, name, role):
    return os.path.join(parent, f".{name}.{role}-{os.getpid()}-{os.urandom(6).hex()}")


@contextlib.contextmanager
def _locked(path):
    """Serializes the fallback check-and-rename with other writers of `path`."""
    parent, name = os.path.split(path)
    fd = os.open(os.path.join(parent, f".{name}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _recover(parent, name):
    """Restores or removes what killed runs left for `name`; spares live pids."""
    try:
        entries = os.listdir(parent)
    except FileNotFoundError:
        return
    for entry in entries:
        for role in ("partial", "old"):
            prefix = f".{name}.{role}-"
            pid, dash, _ = entry[len(prefix) :].partition("-")
            if not (entry.startswith(prefix) and dash and pid.isdigit()):
                continue
            if _alive(int(pid)):  # a concurrent export: its debris is its work
                continue
            debris, path = os.path.join(parent, entry), os.path.join(parent, name)
            # An `.old-` without `path` is an export killed mid-swap: put it back.
            if role == "old" and not os.path.lexists(path):
                with contextlib.suppress(FileNotFoundError, FileExistsError):
                    _publish_new(debris, path)
            _remove(debris)


def _publish_new(staging, path):
    if _rename2(staging, path, _RENAME_NOREPLACE):
        return
    with _locked(path):
        if os.path.lexists(path):
            raise _exists_error(path)
        os.rename(staging, path)


def _swap(staging, path):
    """Puts `staging` at `path`; the old content is removed or left at `staging`."""
    if _rename2(staging, path, _RENAME_EXCHANGE):
        return
    with _locked(path):
        old = _sibling(*os.path.split(path), "old")
        os.rename(path, old)
        try:
            os.rename(staging, path)
        except BaseException:
            os.rename(old, path)
            raise
        _remove(old)


def _chmod_tree(root, dir_mode):
    for here, _, files in os.walk(root):
        os.chmod(here, dir_mode)
        for file in files:
            if not os.path.islink(os.path.join(here, file)):
                os.chmod(os.path.join(here, file), dir_mode & 0o666)


@contextlib.contextmanager
def _staged(path, overwrite, kind, marker):
    path = check_path(path)
    parent, name = os.path.split(path)
    _recover(parent, name)
    refuse_to_replace(path, overwrite, kind=kind, marker=marker)
    os.makedirs(parent, exist_ok=True)
    staging = _sibling(parent, name, "partial")
    # Modes 0o777 and 0o666 let the umask apply, as it does for `model.export`
    # (mkdtemp and mkstemp force 0700 and 0600); reading the result back
    # avoids calling os.umask(), which would race with other threads.
    if kind == "file":
        staging += os.path.splitext(name)[1]  # for writers that infer the format
        os.close(os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    else:
        os.mkdir(staging, 0o777)
    try:
        dir_mode = os.stat(staging).st_mode & 0o777
        yield staging
        if kind == "directory":
            _chmod_tree(staging, dir_mode)
        if not (overwrite and os.path.lexists(path)):
            _publish_new(staging, path)
        else:
            refuse_to_replace(path, overwrite, kind=kind, marker=marker)
            (os.replace if kind == "file" else _swap)(staging, path)
    finally:
        _remove(staging)


def atomic_directory(path, *, overwrite=False, marker="saved_model.pb"):
    """Context manager: a staging directory, published at `path` on success.

    Debris of earlier killed runs for the same `path` is restored or removed
    first. On any exception the staging directory is removed and an existing
    `path` is left as it was.

    Args:
        path: str or os.PathLike. The directory to create.
        overwrite: bool. Replace an existing SavedModel at `path`. Defaults
            to `False`.
        marker: str. The file that makes a directory replaceable. Defaults to
            `"saved_model.pb"`.

    Returns:
        A context manager yielding the staging directory to write into.

    Raises:
        FileExistsError: if `path` exists without `overwrite`, including when
            a concurrent writer published it first.
        ValueError: if `path` may not be replaced (see `refuse_to_replace`).
    """
    return _staged(path, overwrite, "directory", marker)


def atomic_file(path, *, overwrite=False):
    """Context manager: a temporary file, renamed to `path` on success.

    The temporary file keeps the extension of `path`, so writers that infer
    the format from it (such as matplotlib's `savefig`) still do.

    Args:
        path: str or os.PathLike. The file to create.
        overwrite: bool. Replace an existing regular file. Defaults to `False`.

    Returns:
        A context manager yielding the empty temporary file to write to.

    Raises:
        FileExistsError: if `path` exists without `overwrite`.
        ValueError: if `path` may not be replaced (see `refuse_to_replace`).
    """
    return _staged(path, overwrite, "file", None)
