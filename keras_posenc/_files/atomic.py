"""Atomic, crash-safe publication of exported directories and written files.

Why: content written in place is seen half-done by readers and left half-done
by a kill, and a "rename away, rename in" overwrite leaves no `path` at all if
killed between the two renames. Here content is staged in a hidden sibling and
published in one step (`keras_posenc._files.renames`: `renameat2`, or a swap under
a lock where it is missing).

Every writer holds an exclusive `flock` on its own lock file for its whole
life, and whatever a killed run leaves behind is restored or removed by the
next run for the same path only once that lock can be taken. A held lock
proves a live writer where a pid cannot: another container on a shared volume
has its own pid namespace, where a live writer's pid looks dead (or a dead
one's looks alive). The hidden names are short whatever `path` is named, so
any name the filesystem accepts can be published.
"""

__all__ = [
    "atomic_directory",
    "atomic_file",
    "check_path",
    "refuse_to_replace",
]

import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import re

from keras_posenc._files import renames as _renames

# Hidden names are `.{stem}.{token}.{role}`: a stem of at most 24 bytes of
# the name, `~` and 12 hex digits of its SHA-256 (unique to the name), a
# 12-hex-digit token per writer, and a role. With the longest role and a
# kept extension that is at most 1 + 37 + 1 + 12 + 1 + 7 + 64 = 123 bytes,
# far below the 255 of NAME_MAX, however long the published name is.
_PREFIX_BYTES = 24
_DIGEST_DIGITS = _TOKEN_DIGITS = 12
# Longest extension a temporary file keeps (a format suffix: `.png`, `.svg`).
_EXTENSION_CHARS = 16
_NAME_MAX = 255  # where the filesystem cannot be asked (no parent yet)


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


def _check_name_length(path):
    """Refuses a name the filesystem would refuse, before any work."""
    parent, name = os.path.split(path)
    try:
        limit = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):  # no parent yet, or no such setting
        limit = _NAME_MAX
    if 0 < limit < len(os.fsencode(name)):
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)


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
        OSError: `ENAMETOOLONG` if the last component of `path` is longer
            than the filesystem allows.
        FileExistsError: if `path` exists and `overwrite` is false.
        ValueError: if `path` exists, `overwrite` is true, and `path` is `/`,
            the home directory, the current directory or one of its ancestors,
            a symlink, a mount point, a directory without `marker` (for
            `kind="directory"`) or not a regular file (for `kind="file"`).
    """
    path = check_path(path)
    _check_name_length(path)
    while True:
        seen = _renames.identity(path)
        if seen is None:
            return
        if not overwrite:
            raise _renames.exists_error(path)
        reason = _why_not_replace(path, kind, marker)
        if not reason:
            return
        if _renames.identity(path) == seen:
            raise ValueError(f"Refusing to overwrite {path!r}: {reason}.")
        # Renamed away or replaced while looked at (a concurrent writer's
        # fallback swap): judge what is there now.


class _Siblings:
    """The hidden names beside `path` that its writers use.

    `.{stem}.{token}.lock` is a writer's lock, held for the writer's whole
    life; `.{stem}.{token}.partial` (plus the extension of `path`, if short)
    its staging; `.{stem}.{token}.old` the old content during a fallback
    swap; `.{stem}.publishing.lock` serializes fallback publications.
    """

    def __init__(self, path):
        self.path = path
        self.parent, name = os.path.split(path)
        raw = os.fsencode(name)
        prefix = name
        while len(os.fsencode(prefix)) > _PREFIX_BYTES:  # whole characters only
            prefix = prefix[:-1]
        digest = hashlib.sha256(raw).hexdigest()[:_DIGEST_DIGITS]
        self.stem = f"{prefix}~{digest}"
        extension = os.path.splitext(name)[1]
        self.extension = extension if len(extension) <= _EXTENSION_CHARS else ""
        self._lock = re.compile(
            rf"\.{re.escape(self.stem)}\.([0-9a-f]{{{_TOKEN_DIGITS}}})\.lock"
        )

    def of(self, token, role):
        return os.path.join(self.parent, f".{self.stem}.{token}.{role}")

    def hidden_prefix(self):
        """What every hidden name beside `path` starts with."""
        return os.path.join(self.parent, f".{self.stem}.")

    def debris(self, token):
        """Everything a writer with `token` may leave besides its lock."""
        roles = ("partial", "partial" + self.extension, "old")
        return [self.of(token, role) for role in dict.fromkeys(roles)]

    def publishing_lock(self):
        return os.path.join(self.parent, f".{self.stem}.publishing.lock")

    def tokens(self, entries):
        """The tokens of the writer locks among directory `entries`."""
        return [m.group(1) for m in map(self._lock.fullmatch, entries) if m]


def _claim(lock):
    """Takes the lock file `lock` if no one holds it: an fd, or None.

    A lock file is only ever unlinked by a process holding its lock, so a
    lock taken on a file that `lock` still names cannot be held by anyone
    else; one taken on an unlinked file proves nothing and is given back.
    """
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:  # gone, or not ours to lock: spare it
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _renames.same_file(fd, lock):
            return fd
    except OSError:  # held: its writer is alive
        pass
    os.close(fd)
    return None


def _clean(siblings, token):
    """Removes a writer's debris, then its lock file (the caller holds it).

    A lock file whose debris could not all be removed stays (unlocked once
    its holder closes it), so that the next run for `path` tries again.
    """
    debris = siblings.debris(token)
    for path in debris:
        _renames.remove(path)
    if not any(os.path.lexists(path) for path in debris):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(siblings.of(token, "lock"))


def _recover(siblings):
    """Restores or removes what killed runs left; spares every held lock."""
    try:
        entries = os.listdir(siblings.parent)
    except (FileNotFoundError, NotADirectoryError):
        return
    for token in siblings.tokens(entries):
        fd = _claim(siblings.of(token, "lock"))
        if fd is None:  # a live writer (in any pid namespace): its work
            continue
        old = siblings.of(token, "old")
        try:
            # An `.old` without `path` is an export killed mid-swap: put it back.
            if os.path.lexists(old) and not os.path.lexists(siblings.path):
                with contextlib.suppress(FileNotFoundError, FileExistsError):
                    _renames.publish(
                        old,
                        siblings.path,
                        False,
                        None,
                        lock=siblings.publishing_lock(),
                    )
            _clean(siblings, token)
        finally:
            os.close(fd)
    if os.path.basename(siblings.publishing_lock()) in entries:
        fd = _claim(siblings.publishing_lock())  # left by a writer killed in it
        if fd is not None:
            try:
                os.unlink(siblings.publishing_lock())
            finally:
                os.close(fd)


@contextlib.contextmanager
def _writer(siblings):
    """A fresh token whose lock this writer holds until the context ends."""
    while True:
        token = os.urandom(_TOKEN_DIGITS // 2).hex()
        lock = siblings.of(token, "lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # another writer's token: draw again
            continue
        # A recovery may take the lock between the create and the flock, and
        # then unlinks the file: draw again rather than hold a lost lock.
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _renames.same_file(fd, lock):
                break
        except BlockingIOError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield token
    finally:
        try:
            _clean(siblings, token)
        finally:
            os.close(fd)


def _chmod_tree(root, dir_mode):
    for here, _, files in os.walk(root):
        os.chmod(here, dir_mode)
        for file in files:
            if not os.path.islink(os.path.join(here, file)):
                os.chmod(os.path.join(here, file), dir_mode & 0o666)


def _name_the_user_path(error, siblings, staging):
    """Makes an OSError name `path`, not the hidden names beside it.

    A path inside `staging` becomes the same path inside `path`; any other
    hidden sibling (a lock, the old content) becomes `path` itself.
    """
    hidden = siblings.hidden_prefix()
    for attribute in ("filename", "filename2"):
        name = getattr(error, attribute)
        if not isinstance(name, str):
            continue
        if staging and (name == staging or name.startswith(staging + os.sep)):
            setattr(error, attribute, siblings.path + name[len(staging) :])
        elif name.startswith(hidden):
            setattr(error, attribute, siblings.path)


# A strerror text -> its errno: TensorFlow's file errors are not OSErrors
# but end with "; <strerror>" ("...saved_model.pb.tmp1f2e; File too large").
_ERRNO_OF = {os.strerror(code): code for code in sorted(errno.errorcode)}


def _writer_error_naming_the_user_path(error, siblings):
    """An OSError naming `path` for a non-OSError that names a hidden sibling.

    A writer that is not Python's `open` (TensorFlow's file system) reports a
    full disk or a file-size limit with the name of the file it was writing
    inside the staging directory, which is gone once the error is raised.
    Returns None if the message names no hidden sibling.
    """
    hidden = re.compile(re.escape(siblings.hidden_prefix()) + r"[^\s;:,'\"]*")
    lines = [line.strip() for line in str(error).splitlines() if hidden.search(line)]
    if not lines:
        return None
    reason = lines[0].rsplit(";", 1)[-1].strip()
    if ";" in lines[0] and reason in _ERRNO_OF:
        return OSError(_ERRNO_OF[reason], reason, siblings.path)
    return OSError(
        f"Cannot write {siblings.path!r}: {type(error).__name__}: "
        + hidden.sub(lambda _: siblings.path, lines[0])
    )


@contextlib.contextmanager
def _staged(path, overwrite, kind, marker):
    path = check_path(path)
    siblings = _Siblings(path)
    _recover(siblings)
    refuse_to_replace(path, overwrite, kind=kind, marker=marker)
    os.makedirs(siblings.parent, exist_ok=True)
    staging = None
    try:
        with _writer(siblings) as token:
            staging = siblings.of(token, "partial")
            # Modes 0o777 and 0o666 let the umask apply, as it does for
            # `model.export` (mkdtemp and mkstemp force 0700 and 0600);
            # reading the result back avoids calling os.umask(), which would
            # race with other threads.
            if kind == "file":
                staging += siblings.extension  # for writers that infer the format
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
                os.close(os.open(staging, flags, 0o666))
            else:
                os.mkdir(staging, 0o777)
            dir_mode = os.stat(staging).st_mode & 0o777
            yield staging
            if kind == "directory":
                _chmod_tree(staging, dir_mode)
            refuse = functools.partial(
                refuse_to_replace, overwrite=True, kind=kind, marker=marker
            )
            _renames.publish(
                staging,
                path,
                overwrite,
                refuse,
                lock=siblings.publishing_lock(),
                kind=kind,
                old=siblings.of(token, "old"),
            )
    except OSError as error:
        _name_the_user_path(error, siblings, staging)
        raise
    except Exception as error:
        renamed = _writer_error_naming_the_user_path(error, siblings)
        if renamed is None:
            raise
        raise renamed from error


def atomic_directory(path, *, overwrite=False, marker="saved_model.pb"):
    """Context manager: a staging directory, published at `path` on success.

    Debris of earlier killed runs for the same `path` is restored or removed
    first (never a live writer's, in whatever pid namespace it runs). On any
    exception the staging directory is removed and an existing `path` is
    left as it was; an `OSError` names paths under `path`, never under the
    staging directory, and so does any other error of the writer that names
    a file in it (TensorFlow's "File too large", "No space left on device"),
    turned into an `OSError` naming `path`.

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

    The temporary file keeps the extension of `path` (up to 16 characters),
    so writers that infer the format from it (such as matplotlib's
    `savefig`) still do.

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
