"""Tests of the atomic, crash-safe directory and file publication.

First `keras_posenc/_files/atomic.py` on its own (names, refusals, renames, locks,
recovery after kills, writers in other pid namespaces), then what
`export_saved_model` and `export_encoder` may do to a user's files end to end.
"""

import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from _helpers import (
    BACKEND,
    LEGACY,
    encode_positions,
    keras,
    max_diff,
    only_tensorflow,
    random_inputs,
    serve,
    to_numpy,
)

from keras_posenc import SinusoidalPositionEncoding, export_encoder, export_saved_model
from keras_posenc._files import atomic as _files
from keras_posenc._files import renames as _renames
from keras_posenc.export import EXPORT_BACKENDS

# `_files` and `_renames` are stdlib only: the killed subprocesses below load
# them without the package's `__init__` (no Keras, TensorFlow, JAX or torch
# to import), so that they start in milliseconds.
PACKAGE = Path(__file__).resolve().parents[1] / "keras_posenc"
LOAD = """
import os, signal, sys, types
package = types.ModuleType("keras_posenc")
package.__path__ = [sys.argv[1]]
sys.modules["keras_posenc"] = package
from keras_posenc._files import atomic as files
from keras_posenc._files import renames as renames
"""
# Longest hidden name beside any published name, in bytes (docs/design.md).
HIDDEN_NAME_BYTES = 123
NAME_MAX = 255


def _saved_model(path, content=b"old graph"):
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(content)
    (path / "variables" / "variables.index").write_bytes(content + b" index")
    return path


def _tree(root):
    """Every file under `root` (relative path to bytes), for byte-wise checks."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(Path(root).rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _snapshot(root):
    """Every path under `root` with its mode and content (or link target)."""
    found = {}
    for path in sorted(Path(root).rglob("*")):
        info = path.lstat()
        if path.is_symlink():
            content = "->" + os.readlink(path)
        elif path.is_file():
            content = path.read_bytes()
        else:
            content = "dir"
        found[str(path.relative_to(root))] = (oct(info.st_mode), content)
    return found


def _listing(parent):
    # Everything, hidden names and lock files included: nothing may stay.
    return sorted(os.listdir(parent))


def _write(directory, content=b"new graph"):
    Path(directory, "saved_model.pb").write_bytes(content)


def _hidden(path, token, role):
    """The hidden sibling `role` of writer `token` beside `path`."""
    return Path(_files._Siblings(str(path)).of(token, role))


def _dead_writer(path, token="0123456789ab", roles=("partial",)):
    """What a killed writer leaves: its lock file (unlocked) and `roles`."""
    _hidden(path, token, "lock").touch()
    made = [_hidden(path, token, role) for role in roles]
    for debris in made:
        if debris.name.endswith(".old"):
            _saved_model(debris)
        else:
            debris.mkdir()
    return made


def _hold(lock):
    """Opens and flocks `lock` as a live writer does: close the fd to release."""
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.fixture(params=["renameat2", "fallback"])
def rename_mode(request, tmp_path, monkeypatch):
    if request.param == "fallback":
        # Stands in for a kernel, libc or filesystem without renameat2.
        monkeypatch.setattr(_renames, "rename2", lambda *args: False)
    elif not _renames.exchange_supported(tmp_path):
        pytest.skip("renameat2(RENAME_EXCHANGE) is unsupported on this filesystem")
    return request.param


def _invalid(value, name="path"):
    return re.escape(
        f"Received an invalid value for `{name}`, expected a non-empty str or "
        f"os.PathLike path. Received: {name}={value!r}"
    )


# check_path


@pytest.mark.parametrize("value", [None, 123, b"x"])
def test_check_path_rejects_non_path_types(value):
    # None, an int or bytes is a TypeError that names `path` and echoes it.
    with pytest.raises(TypeError, match=_invalid(value)):
        _files.check_path(value)


def test_check_path_rejects_the_empty_string():
    # "" (an unset shell variable) is a ValueError, never the current directory.
    with pytest.raises(ValueError, match=_invalid("")):
        _files.check_path("")


def test_check_path_names_the_given_argument():
    # The message names the caller's argument, not always `path`.
    with pytest.raises(TypeError, match=_invalid(None, "out")):
        _files.check_path(None, "out")


def test_check_path_returns_an_absolute_str(tmp_path, monkeypatch):
    # A relative os.PathLike comes back as an absolute str.
    monkeypatch.chdir(tmp_path)
    assert _files.check_path(Path("model")) == str(tmp_path / "model")


# refuse_to_replace and the protected paths


def test_existing_path_without_overwrite_is_a_one_line_file_exists_error(tmp_path):
    # Without overwrite an existing path fails early, naming it and the flag.
    (tmp_path / "model").mkdir()
    message = re.escape(
        f"{str(tmp_path / 'model')!r}. Pass overwrite=True (or --overwrite)"
    )
    with pytest.raises(FileExistsError, match=message):
        _files.refuse_to_replace(tmp_path / "model", False)


def test_missing_path_passes_the_early_check(tmp_path):
    # Nothing to replace: the early check lets the caller go on.
    assert _files.refuse_to_replace(tmp_path / "model", False) is None


@pytest.mark.parametrize(
    "which, reason",
    [
        (".", "the current directory or one of its ancestors"),
        ("cwd", "the current directory or one of its ancestors"),
        ("ancestor", "the current directory or one of its ancestors"),
        ("home", "the home directory"),
    ],
)
def test_overwrite_refuses_protected_directories(tmp_path, monkeypatch, which, reason):
    # `export . --overwrite` and friends fail before writing, even over a
    # SavedModel, and every user file stays byte for byte.
    home, cwd = tmp_path / "home", tmp_path / "work" / "project"
    for folder in (home, cwd):
        _saved_model(folder)
        (folder / "notes.txt").write_bytes(b"user data\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    path = {".": ".", "cwd": cwd, "ancestor": tmp_path / "work", "home": home}[which]
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match=f"Refusing to overwrite .*: it is {reason}"):
        with _files.atomic_directory(path, overwrite=True) as staging:
            _write(staging)
    assert _tree(tmp_path) == before
    assert _listing(cwd) == ["notes.txt", "saved_model.pb", "variables"]


def test_overwrite_refuses_the_root_directory():
    # `/` is never replaced, whatever it holds.
    with pytest.raises(ValueError, match="'/': it is the root directory"):
        _files.refuse_to_replace("/", True)


def test_overwrite_refuses_a_directory_that_is_not_a_saved_model(tmp_path):
    # Only a directory holding saved_model.pb may be replaced; others stay.
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff\xd8 cat")
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match="not a SavedModel directory"):
        with _files.atomic_directory(tmp_path / "photos", overwrite=True) as staging:
            _write(staging)
    assert _tree(tmp_path) == before
    assert _listing(tmp_path) == ["photos"]


def test_overwrite_refuses_a_symlink(tmp_path):
    # A symlink is refused even to a SavedModel: replacing it would not
    # replace what it points to.
    _saved_model(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    message = re.escape(f"{str(tmp_path / 'link')!r}: it is a symlink")
    with pytest.raises(ValueError, match=message):
        _files.refuse_to_replace(tmp_path / "link", True)


def test_overwrite_refuses_a_mount_point(tmp_path, monkeypatch):
    # A mount point cannot be renamed away; it is refused, not half-swapped.
    _saved_model(tmp_path / "mnt")
    monkeypatch.setattr(os.path, "ismount", lambda p: p == str(tmp_path / "mnt"))
    with pytest.raises(ValueError, match="it is a mount point"):
        _files.refuse_to_replace(tmp_path / "mnt", True)


# atomic_directory


def test_publishes_a_new_directory(tmp_path):
    # The staged content appears at `path`, and nothing else is left beside it.
    with _files.atomic_directory(tmp_path / "model") as staging:
        _write(staging)
    assert _tree(tmp_path / "model") == {"saved_model.pb": b"new graph"}
    assert _listing(tmp_path) == ["model"]


def test_creates_missing_parent_directories(tmp_path):
    # Like `model.export`, a path under missing folders is created.
    with _files.atomic_directory(tmp_path / "a" / "b" / "model") as staging:
        _write(staging)
    assert (tmp_path / "a" / "b" / "model" / "saved_model.pb").is_file()


def test_overwrite_replaces_a_saved_model_exactly(tmp_path, rename_mode):
    # With overwrite the new export replaces the old one whole: no old file
    # survives and no debris is left.
    _saved_model(tmp_path / "model")
    with _files.atomic_directory(tmp_path / "model", overwrite=True) as staging:
        _write(staging)
    assert _tree(tmp_path / "model") == {"saved_model.pb": b"new graph"}
    assert _listing(tmp_path) == ["model"]


def test_existing_path_without_overwrite_stays_untouched(tmp_path):
    # Refused before the body runs; the old export and the folder are as before.
    _saved_model(tmp_path / "model")
    before = _tree(tmp_path)
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    assert _tree(tmp_path) == before
    assert _listing(tmp_path) == ["model"]


@pytest.mark.parametrize(
    "umask, dir_mode, file_mode",
    [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600), (0o002, 0o775, 0o664)],
)
def test_published_modes_follow_the_umask(tmp_path, umask, dir_mode, file_mode):
    # Like `model.export`: dirs 0o777 & ~umask, files 0o666 & ~umask, even
    # where the writer made them 0700 / 0600.
    previous = os.umask(umask)
    try:
        with _files.atomic_directory(tmp_path / "model") as staging:
            os.mkdir(os.path.join(staging, "variables"), 0o700)
            os.close(
                os.open(os.path.join(staging, "saved_model.pb"), os.O_CREAT, 0o600)
            )
    finally:
        os.umask(previous)
    model = tmp_path / "model"
    assert stat.S_IMODE(model.stat().st_mode) == dir_mode
    assert stat.S_IMODE((model / "variables").stat().st_mode) == dir_mode
    assert stat.S_IMODE((model / "saved_model.pb").stat().st_mode) == file_mode


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_failure_in_the_body_keeps_the_old_export(tmp_path, rename_mode, error):
    # An error (or Ctrl-C) while exporting leaves the old export byte for byte
    # and removes the staging directory.
    _saved_model(tmp_path / "model")
    before = _tree(tmp_path)
    with pytest.raises(error, match="boom"):
        with _files.atomic_directory(tmp_path / "model", overwrite=True) as staging:
            _write(staging)
            raise error("boom")
    assert _tree(tmp_path) == before
    assert _listing(tmp_path) == ["model"]


def test_failure_in_the_body_publishes_nothing(tmp_path):
    # A failed first export leaves no `path` and no debris.
    with pytest.raises(RuntimeError, match="boom"):
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
            raise RuntimeError("boom")
    assert _listing(tmp_path) == []


def test_eio_in_the_exchange_keeps_the_old_export(tmp_path, monkeypatch):
    # An I/O error in the one-step swap leaves the old export and no debris.
    def failing_rename2(src, dst, flags):
        raise OSError(errno.EIO, os.strerror(errno.EIO), dst)

    monkeypatch.setattr(_renames, "rename2", failing_rename2)
    _saved_model(tmp_path / "model")
    before = _tree(tmp_path)
    with pytest.raises(OSError, match=os.strerror(errno.EIO)):
        with _files.atomic_directory(tmp_path / "model", overwrite=True) as staging:
            _write(staging)
    assert _tree(tmp_path) == before
    assert _listing(tmp_path) == ["model"]


def test_eio_between_the_fallback_renames_puts_the_old_export_back(
    tmp_path, monkeypatch
):
    # Without renameat2, an error in `rename(staging -> path)` after
    # `rename(path -> old)` is rolled back: `path` is the old export again.
    monkeypatch.setattr(_renames, "rename2", lambda *args: False)
    real_rename = os.rename

    def rename(src, dst):
        if src.endswith(".partial"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), src)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    _saved_model(tmp_path / "model")
    before = _tree(tmp_path / "model")
    with pytest.raises(OSError, match=os.strerror(errno.EIO)):
        with _files.atomic_directory(tmp_path / "model", overwrite=True) as staging:
            _write(staging)
    assert _tree(tmp_path / "model") == before
    assert _listing(tmp_path) == ["model"]


@pytest.mark.skipif(not _renames.HAVE_RENAMEAT2, reason="no renameat2 in libc")
def test_renameat2_errors_name_the_destination(tmp_path):
    # An errno other than EEXIST or "unsupported" is an OSError naming `dst`.
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "dst"))):
        _renames.rename2(
            tmp_path / "missing", tmp_path / "dst", _renames.RENAME_NOREPLACE
        )


def _at_once(target, arguments):
    """Calls `target(*args)` for each of `arguments`, each in its own
    thread, all started before any is joined."""
    threads = [threading.Thread(target=target, args=args) for args in arguments]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _overwrites_at_once(path, count, wait_before_writing):
    """`count` writers export to `path` with overwrite=True at once, writer
    `i` writing `str(i)`; inside their staging they meet at a barrier, before
    writing (`wait_before_writing`) or after. Returns what they raised."""
    barrier, errors = threading.Barrier(count), []

    def export(label):
        try:
            with _files.atomic_directory(path, overwrite=True) as s:
                if wait_before_writing:
                    barrier.wait(timeout=10)
                _write(s, label.encode())
                if not wait_before_writing:
                    barrier.wait(timeout=10)
        except BaseException as error:
            errors.append(error)

    _at_once(export, [(str(i),) for i in range(count)])
    return errors


def test_concurrent_new_exports_exactly_one_wins(tmp_path, rename_mode):
    # Two writers that both saw no `path`: one publishes, the other gets
    # FileExistsError instead of silently replacing the winner.
    barrier, outcomes = threading.Barrier(2), {}

    def export(label):
        try:
            with _files.atomic_directory(tmp_path / "model") as staging:
                _write(staging, label.encode())
                barrier.wait(timeout=10)
            outcomes[label] = "published"
        except FileExistsError as error:
            outcomes[label] = str(error)

    _at_once(export, [(label,) for label in "ab"])
    (winner,) = [label for label, outcome in outcomes.items() if outcome == "published"]
    (loser,) = {"a", "b"} - {winner}
    assert "Pass overwrite=True (or --overwrite)" in outcomes[loser]
    assert _tree(tmp_path / "model") == {"saved_model.pb": winner.encode()}
    assert _listing(tmp_path) == ["model"]


def test_exchange_supported_leaves_nothing_behind(tmp_path):
    # The probe answers a bool and removes its two probe directories.
    assert isinstance(_renames.exchange_supported(tmp_path), bool)
    assert os.listdir(tmp_path) == []


def test_concurrent_overwrites_all_publish(tmp_path, rename_mode):
    # Six writers replace one export at once, each running its recovery while
    # the others are staged: none takes another's staging for debris, every
    # one publishes, the last one's content stays, nothing else is left.
    _saved_model(tmp_path / "model")
    assert _overwrites_at_once(tmp_path / "model", 6, wait_before_writing=True) == []
    assert _tree(tmp_path / "model")["saved_model.pb"] in {
        b"0",
        b"1",
        b"2",
        b"3",
        b"4",
        b"5",
    }
    assert _listing(tmp_path) == ["model"]


def test_refusal_judges_the_export_there_after_a_concurrent_swap(tmp_path, monkeypatch):
    # Another writer's fallback swap (rename away, rename in) lands while the
    # marker is looked for: the new export is judged, not the gap between.
    _saved_model(tmp_path / "model")
    _saved_model(tmp_path / "next", b"next graph")
    real_isfile, swapped = os.path.isfile, []

    def isfile_during_a_swap(path):
        if not swapped:
            swapped.append(True)
            os.rename(tmp_path / "model", tmp_path / "old")
            found = real_isfile(path)
            os.rename(tmp_path / "next", tmp_path / "model")
            return found
        return real_isfile(path)

    monkeypatch.setattr(_files.os.path, "isfile", isfile_during_a_swap)
    _files.refuse_to_replace(tmp_path / "model", overwrite=True)
    assert swapped == [True]
    monkeypatch.undo()
    # A directory that keeps lacking the marker is still refused.
    (tmp_path / "model" / "saved_model.pb").unlink()
    with pytest.raises(ValueError, match="no saved_model.pb inside"):
        _files.refuse_to_replace(tmp_path / "model", overwrite=True)


def test_concurrent_overwrites_of_a_missing_path_all_publish(tmp_path, rename_mode):
    # Writers with overwrite=True that all saw no `path`: the ones that lose
    # the race to create it replace the winner instead of failing.
    assert _overwrites_at_once(tmp_path / "model", 4, wait_before_writing=False) == []
    assert _tree(tmp_path / "model")["saved_model.pb"] in {b"0", b"1", b"2", b"3"}
    assert _listing(tmp_path) == ["model"]


def test_fallback_leaves_no_lock_file(tmp_path, monkeypatch):
    # Without renameat2, a new export, an overwrite and a failed overwrite
    # leave nothing beside `path`: the lock file goes with its lock.
    monkeypatch.setattr(_renames, "rename2", lambda *args: False)
    with _files.atomic_directory(tmp_path / "model") as staging:
        _write(staging, b"first")
    with _files.atomic_directory(tmp_path / "model", overwrite=True) as staging:
        _write(staging, b"second")
    with pytest.raises(RuntimeError, match="boom"):
        with _files.atomic_directory(tmp_path / "model", overwrite=True) as staging:
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == ["model"]
    assert _tree(tmp_path / "model") == {"saved_model.pb": b"second"}


def test_fallback_lock_admits_one_holder_at_a_time(tmp_path):
    # Eight threads take the publishing lock 40 times each: never two holders
    # at once, though every holder unlinks the file it locked (a waiter that
    # wakes holding an unlinked file must start again), and no file stays.
    siblings = _files._Siblings(str(tmp_path / "model"))
    holders, most, guard = [0], [0], threading.Lock()

    def take():
        for _ in range(40):
            with _renames.serialized(siblings.publishing_lock()):
                with guard:
                    holders[0] += 1
                    most[0] = max(most[0], holders[0])
                time.sleep(0)  # let a waiter wake while the lock is held
                with guard:
                    holders[0] -= 1

    _at_once(take, [()] * 8)
    assert most[0] == 1
    assert os.listdir(tmp_path) == []


# Names: any name the filesystem accepts is published


@pytest.mark.parametrize(
    "name",
    ["m" * 230, "m" * NAME_MAX, "\u00e9" * 127, "\U0001f600" * 63],
    ids=["230", "255", "2-byte-chars", "4-byte-chars"],
)
def test_long_names_are_published(tmp_path, rename_mode, name):
    # A 230-character name, and names of up to NAME_MAX bytes, are published
    # and replaced (the staging name once passed 255 bytes: ENAMETOOLONG).
    with _files.atomic_directory(tmp_path / name) as staging:
        _write(staging, b"first")
    with _files.atomic_directory(tmp_path / name, overwrite=True) as staging:
        _write(staging, b"second")
    assert _tree(tmp_path / name) == {"saved_model.pb": b"second"}
    assert _listing(tmp_path) == [name]


@pytest.mark.parametrize(
    "name",
    ["m" * NAME_MAX, "\U0001f600" * 63, "x." + "\U0001f600" * 15, "a" * 200 + ".png"],
    ids=["255", "4-byte-chars", "4-byte-extension", "long-stem-png"],
)
def test_hidden_names_stay_short(name):
    # Every hidden sibling (lock, staging, old, publishing lock) is at most
    # HIDDEN_NAME_BYTES bytes, whatever the published name, and still starts
    # with the name's first characters for whoever finds it.
    siblings = _files._Siblings(name)
    hidden = [siblings.publishing_lock()]
    hidden += [siblings.of("0" * 12, "lock")] + siblings.debris("0" * 12)
    for path in hidden:
        assert len(os.fsencode(os.path.basename(path))) <= HIDDEN_NAME_BYTES, path
        assert os.path.basename(path).startswith("." + name[:3])


def test_a_name_the_filesystem_refuses_fails_before_any_work(tmp_path):
    # A name of NAME_MAX + 1 bytes is the filesystem's own ENAMETOOLONG,
    # naming the user's path, raised before the body runs; nothing is left.
    path = tmp_path / ("m" * (NAME_MAX + 1))
    with pytest.raises(OSError) as raised:
        with _files.atomic_directory(path):
            pytest.fail("the body ran")
    assert raised.value.errno == errno.ENAMETOOLONG
    assert raised.value.filename == str(path)
    assert _listing(tmp_path) == []


def test_errors_inside_the_staging_name_the_users_path(tmp_path):
    # An OSError of the writer about a file it writes names that file under
    # `path`, never under the hidden staging directory.
    with pytest.raises(FileNotFoundError) as raised:
        with _files.atomic_directory(tmp_path / "model") as staging:
            open(os.path.join(staging, "variables", "variables.index"), "rb")
    user_file = str(tmp_path / "model" / "variables" / "variables.index")
    assert raised.value.filename == user_file
    assert str(raised.value).endswith(repr(user_file))
    assert _listing(tmp_path) == []


@pytest.mark.parametrize(
    "reason, code",
    [("File too large", errno.EFBIG), ("No space left on device", errno.ENOSPC)],
)
def test_a_writers_non_os_error_about_the_staging_names_the_users_path(
    tmp_path, reason, code
):
    # TensorFlow reports a full disk or a file-size limit as its own error
    # type, naming its temporary file inside the staging directory (gone by
    # then): it becomes an OSError with that errno, naming `path`.
    path = tmp_path / "model"
    with pytest.raises(OSError) as raised:
        with _files.atomic_directory(path) as staging:
            temporary = os.path.join(staging, "saved_model.pb.tmp1f2e3d")
            raise RuntimeError(f"{temporary}; {reason}\n\t [[{{{{node SaveV2}}}}]]")
    assert (raised.value.errno, raised.value.filename) == (code, str(path))
    assert str(raised.value) == f"[Errno {code}] {reason}: {str(path)!r}"
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert _listing(tmp_path) == []


def test_a_writers_other_error_about_the_staging_names_the_users_path(tmp_path):
    # Without an errno to read, the message keeps the writer's words with
    # `path` in place of the hidden name.
    path = tmp_path / "model"
    with pytest.raises(OSError) as raised:
        with _files.atomic_directory(path) as staging:
            raise ValueError(f"cannot finish {staging}/variables: quota")
    assert str(raised.value) == (
        f"Cannot write {str(path)!r}: ValueError: cannot finish {path}: quota"
    )


def test_a_writers_error_about_something_else_passes_unchanged(tmp_path):
    # Only messages naming the hidden siblings are rewritten.
    with pytest.raises(ValueError, match="^bad input$"):
        with _files.atomic_directory(tmp_path / "model"):
            raise ValueError("bad input")


@pytest.mark.parametrize("role", ["lock", "partial"])
def test_errors_making_hidden_names_name_the_users_path(tmp_path, monkeypatch, role):
    # A refused lock file or staging directory (read-only or full volume) is
    # an OSError naming `path`, not the hidden name it could not make.
    def refuse(call):
        def refusing(target, *args, **kwargs):
            if os.fspath(target).endswith("." + role):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), target)
            return call(target, *args, **kwargs)

        return refusing

    monkeypatch.setattr(os, "open", refuse(os.open))
    monkeypatch.setattr(os, "mkdir", refuse(os.mkdir))
    with pytest.raises(PermissionError) as raised:
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    assert raised.value.filename == str(tmp_path / "model")
    assert f".{role}" not in str(raised.value)
    monkeypatch.undo()
    assert _listing(tmp_path) == []


# Recovery of what killed runs left


def test_recovery_removes_a_dead_writers_partial(tmp_path):
    # A staging directory whose lock file nobody holds is removed, with its
    # lock file, by the next export.
    _dead_writer(tmp_path / "model")
    with _files.atomic_directory(tmp_path / "model") as staging:
        _write(staging)
    assert _listing(tmp_path) == ["model"]


def test_recovery_restores_a_dead_writers_old_when_path_is_missing(tmp_path):
    # A dead writer's `.old` without `path` is the old export stranded
    # mid-swap: it is put back (so a no-overwrite export is then refused).
    (old,) = _dead_writer(tmp_path / "model", roles=("old",))
    before = _tree(old)
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    assert _tree(tmp_path / "model") == before
    assert _listing(tmp_path) == ["model"]


def test_recovery_removes_a_dead_writers_old_when_path_exists(tmp_path):
    # With `path` in place, a dead writer's `.old` is a leftover: removed.
    _dead_writer(tmp_path / "model", roles=("old", "partial"))
    _saved_model(tmp_path / "model", b"current")
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    assert _tree(tmp_path / "model")["saved_model.pb"] == b"current"
    assert _listing(tmp_path) == ["model"]


def test_recovery_spares_a_live_writers_debris(tmp_path):
    # A staging and an `.old` whose lock file is held are a concurrent
    # export at work: left alone, lock file included.
    made = _dead_writer(tmp_path / "model", roles=("partial", "old"))
    fd = _hold(_hidden(tmp_path / "model", "0123456789ab", "lock"))
    try:
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    finally:
        os.close(fd)
    lock = _hidden(tmp_path / "model", "0123456789ab", "lock")
    assert _listing(tmp_path) == sorted([p.name for p in made] + [lock.name, "model"])


def test_recovery_spares_debris_without_a_lock_file(tmp_path):
    # A hidden staging with no lock file beside it may belong to a live
    # writer whose lock file someone deleted: never removed.
    orphan = _hidden(tmp_path / "model", "0123456789ab", "partial")
    orphan.mkdir()
    with _files.atomic_directory(tmp_path / "model") as staging:
        _write(staging)
    assert _listing(tmp_path) == sorted([orphan.name, "model"])


def test_recovery_spares_other_names(tmp_path):
    # Only debris of the same name is recovered: `other`'s and that of
    # `model.v2`, a name that starts like it, stay.
    made = _dead_writer(tmp_path / "other") + _dead_writer(tmp_path / "model.v2")
    locks = [
        _hidden(tmp_path / n, "0123456789ab", "lock") for n in ("other", "model.v2")
    ]
    with _files.atomic_directory(tmp_path / "model") as staging:
        _write(staging)
    assert _listing(tmp_path) == sorted([p.name for p in made + locks] + ["model"])


def test_a_writer_whose_new_lock_a_recovery_took_draws_another(tmp_path, monkeypatch):
    # A recovery that takes a writer's lock file in the instant between its
    # creation and the writer's flock removes it; the writer then holds a
    # lock on an unlinked file and must draw a new one, which it holds.
    real_open, raced = os.open, []

    def open_then_recover(target, flags, *args):
        fd = real_open(target, flags, *args)
        if flags & os.O_EXCL and not raced:
            raced.append(target)
            _files._recover(_files._Siblings(str(tmp_path / "model")))
        return fd

    monkeypatch.setattr(os, "open", open_then_recover)
    with _files.atomic_directory(tmp_path / "model") as staging:
        monkeypatch.undo()
        (lock,) = [e for e in os.listdir(tmp_path) if e.endswith(".lock")]
        assert str(tmp_path / lock) != raced[0]
        assert _files._claim(str(tmp_path / lock)) is None  # held
        _write(staging)
    assert _listing(tmp_path) == ["model"]


def _live_writer(tmp_path):
    """A process in this pid namespace, staged over `model`, waiting on stdin.

    On a line of stdin it writes its saved_model.pb (as TensorFlow writes
    into the staging directory) and publishes.
    """
    script = LOAD + textwrap.dedent(
        """
        with files.atomic_directory(sys.argv[2], overwrite=True) as staging:
            print("staged", flush=True)
            sys.stdin.readline()
            open(os.path.join(staging, "saved_model.pb"), "wb").write(b"live")
        """
    )
    command = [sys.executable, "-c", script, str(PACKAGE), str(tmp_path / "model")]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"staged\n"
    return proc


def _finish_live_writer(proc):
    out, _ = proc.communicate(b"go\n", timeout=60)
    return proc.returncode


def _pid_namespace_command():
    """`unshare` arguments that run a command in a new pid namespace, or None."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    pid_namespace = ["--pid", "--fork", "--mount-proc"]
    # As root; else in a user namespace where unprivileged ones are allowed.
    for flags in (pid_namespace, ["--user", "--map-root-user", *pid_namespace]):
        probe = subprocess.run([unshare, *flags, "true"], capture_output=True)
        if probe.returncode == 0:
            return [unshare, *flags]
    return None


def test_recovery_in_another_pid_namespace_spares_a_live_writer(tmp_path):
    # Another container on a shared volume: an export running in a new pid
    # namespace (`unshare --pid`), where the live writer's pid does not
    # exist, recovers, publishes, and leaves the live writer's staging
    # alone; the live writer then publishes over it.
    unshare = _pid_namespace_command()
    if unshare is None:
        pytest.skip("cannot make a pid namespace here (no unshare, or not allowed)")
    _saved_model(tmp_path / "model")
    writer = _live_writer(tmp_path)
    try:
        staged = _listing(tmp_path)
        script = LOAD + textwrap.dedent(
            """
            writer = int(sys.argv[3])
            try:
                os.kill(writer, 0)
                print("writer pid alive here")
            except ProcessLookupError:
                print("writer pid unknown here")
            with files.atomic_directory(sys.argv[2], overwrite=True) as staging:
                open(os.path.join(staging, "saved_model.pb"), "wb").write(b"other")
            """
        )
        args = [str(PACKAGE), str(tmp_path / "model"), str(writer.pid)]
        foreign = subprocess.run(
            [*unshare, sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert foreign.returncode == 0, foreign.stderr
        assert foreign.stdout == "writer pid unknown here\n"
        assert _listing(tmp_path) == staged
        assert _tree(tmp_path / "model") == {"saved_model.pb": b"other"}
    finally:
        code = _finish_live_writer(writer)
    assert code == 0
    assert _tree(tmp_path / "model") == {"saved_model.pb": b"live"}
    assert _listing(tmp_path) == ["model"]


def test_recovery_spares_a_live_writer_whose_pid_looks_dead(tmp_path, monkeypatch):
    # The same condition where no pid namespace can be made: every pid of
    # the writer's namespace is "no such process" from another namespace,
    # so here every os.kill answers ESRCH. The staging of a live writer is
    # spared (its lock is held), and the live writer still publishes.
    _saved_model(tmp_path / "model")
    writer = _live_writer(tmp_path)
    try:
        staged = _listing(tmp_path)

        def no_such_process(pid, signal_number):
            raise ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH))

        with monkeypatch.context() as patch:
            patch.setattr(os, "kill", no_such_process)
            with _files.atomic_directory(tmp_path / "model", overwrite=True) as s:
                _write(s, b"other")
        assert _listing(tmp_path) == staged
    finally:
        code = _finish_live_writer(writer)
    assert code == 0
    assert _tree(tmp_path / "model") == {"saved_model.pb": b"live"}
    assert _listing(tmp_path) == ["model"]


def _killed_export(tmp_path):
    """A process SIGKILLed inside `atomic_directory` over a SavedModel."""
    script = LOAD + textwrap.dedent(
        """
        with files.atomic_directory(sys.argv[2], overwrite=True) as staging:
            open(os.path.join(staging, "saved_model.pb"), "wb").write(b"new")
            print("staged", flush=True)
            sys.stdin.read()
        """
    )
    command = [sys.executable, "-c", script, str(PACKAGE), str(tmp_path / "model")]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"staged\n"
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def test_kill_9_mid_export_keeps_the_old_export(tmp_path):
    # A kill -9 while staging leaves the old export byte for byte, and its
    # staging directory and (unlocked) lock file as evidence of the crash.
    _saved_model(tmp_path / "model")
    before = _tree(tmp_path / "model")
    _killed_export(tmp_path)
    assert _tree(tmp_path / "model") == before
    lock, partial, model = _listing(tmp_path)
    token = re.fullmatch(r"\.model~[0-9a-f]{12}\.([0-9a-f]{12})\.lock", lock).group(1)
    assert partial == _hidden(tmp_path / "model", token, "partial").name
    assert _files._claim(str(tmp_path / lock)) is not None  # nobody holds it


def test_next_export_cleans_what_a_kill_9_left(tmp_path):
    # The next export removes the killed run's staging and lock file.
    _saved_model(tmp_path / "model")
    _killed_export(tmp_path)
    with _files.atomic_directory(tmp_path / "model", overwrite=True) as staging:
        _write(staging)
    assert _listing(tmp_path) == ["model"]


def test_kill_9_between_the_fallback_renames_is_restored(tmp_path):
    # Without renameat2, a kill between `rename(path -> old)` and
    # `rename(staging -> path)` leaves no `path`; the next export restores
    # it and removes every hidden file, the publishing lock included.
    script = LOAD + textwrap.dedent(
        """
        renames.rename2 = lambda *args: False
        real_rename = os.rename
        def rename(src, dst):
            if src.endswith(".partial"):
                os.kill(os.getpid(), signal.SIGKILL)
            real_rename(src, dst)
        os.rename = rename
        with files.atomic_directory(sys.argv[2], overwrite=True) as staging:
            open(os.path.join(staging, "saved_model.pb"), "wb").write(b"new")
        """
    )
    _saved_model(tmp_path / "model")
    before = _tree(tmp_path / "model")
    command = [sys.executable, "-c", script, str(PACKAGE), str(tmp_path / "model")]
    assert subprocess.run(command).returncode == -signal.SIGKILL
    assert not (tmp_path / "model").exists()
    assert any(e.endswith(".publishing.lock") for e in _listing(tmp_path))
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    assert _tree(tmp_path / "model") == before
    assert _listing(tmp_path) == ["model"]


# atomic_file


def _write_file(path, data, overwrite=False):
    """Writes the bytes `data` to `path` through `atomic_file`."""
    with _files.atomic_file(path, overwrite=overwrite) as temp:
        Path(temp).write_bytes(data)


def test_file_publishes_a_new_file(tmp_path):
    # The written temporary file appears at `path`; nothing else is left.
    _write_file(tmp_path / "pe.png", b"png")
    assert (tmp_path / "pe.png").read_bytes() == b"png"
    assert _listing(tmp_path) == ["pe.png"]


def test_file_refuses_an_existing_file_without_overwrite(tmp_path):
    # An existing file is kept byte for byte unless overwrite is asked for.
    (tmp_path / "pe.png").write_bytes(b"old")
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        _write_file(tmp_path / "pe.png", b"new")
    assert (tmp_path / "pe.png").read_bytes() == b"old"
    assert _listing(tmp_path) == ["pe.png"]


def test_file_overwrites_a_regular_file(tmp_path):
    # With overwrite a regular file is replaced in one rename.
    (tmp_path / "pe.png").write_bytes(b"old")
    _write_file(tmp_path / "pe.png", b"new", overwrite=True)
    assert (tmp_path / "pe.png").read_bytes() == b"new"
    assert _listing(tmp_path) == ["pe.png"]


def test_file_never_overwrites_a_directory(tmp_path):
    # Even with overwrite, a directory at the file's path is refused intact.
    (tmp_path / "pe.png").mkdir()
    (tmp_path / "pe.png" / "keep.txt").write_bytes(b"keep")
    with pytest.raises(ValueError, match="it is not a regular file"):
        _write_file(tmp_path / "pe.png", b"new", overwrite=True)
    assert _tree(tmp_path) == {"pe.png/keep.txt": b"keep"}


def test_file_temporary_is_removed_on_failure(tmp_path):
    # A failing writer leaves neither `path` nor the temporary file.
    with pytest.raises(RuntimeError, match="boom"):
        with _files.atomic_file(tmp_path / "pe.png") as temp:
            Path(temp).write_bytes(b"half")
            raise RuntimeError("boom")
    assert _listing(tmp_path) == []


def test_file_temporary_keeps_the_extension(tmp_path):
    # The temporary is a hidden sibling ending in `.png`, so matplotlib infers
    # the format from it.
    with _files.atomic_file(tmp_path / "pe.png") as temp:
        assert os.path.dirname(temp) == str(tmp_path)
        assert re.fullmatch(
            r"\.pe\.png~[0-9a-f]{12}\.[0-9a-f]{12}\.partial\.png",
            os.path.basename(temp),
        )


def test_file_mode_follows_the_umask(tmp_path):
    # Like a plain open(): 0o666 & ~umask, not mkstemp's 0600.
    previous = os.umask(0o022)
    try:
        _write_file(tmp_path / "pe.png", b"png")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "pe.png").stat().st_mode) == 0o644


def test_file_cleans_a_dead_writers_temporary(tmp_path):
    # A killed writer's `.pe.png~{digest}.{token}.partial.png` goes with the
    # next write, and so does its lock file.
    _hidden(tmp_path / "pe.png", "0123456789ab", "lock").touch()
    _hidden(tmp_path / "pe.png", "0123456789ab", "partial.png").write_bytes(b"half")
    _write_file(tmp_path / "pe.png", b"png")
    assert _listing(tmp_path) == ["pe.png"]


def test_file_with_a_230_character_name_is_published(tmp_path):
    # A 230-character `.png` name is published; its temporary, far shorter,
    # still ends in `.png` for the writer to infer the format.
    name = "p" * 226 + ".png"
    with _files.atomic_file(tmp_path / name) as temp:
        assert temp.endswith(".partial.png")
        Path(temp).write_bytes(b"png")
    assert (tmp_path / name).read_bytes() == b"png"
    assert _listing(tmp_path) == [name]


def test_file_temporary_drops_an_extension_too_long_for_a_format(tmp_path):
    # A suffix past 16 characters names no format and could not fit beside a
    # long name: the temporary ends in `.partial` alone.
    name = "notes." + "x" * 17
    with _files.atomic_file(tmp_path / name) as temp:
        assert temp.endswith(".partial")
        Path(temp).write_bytes(b"text")
    assert _listing(tmp_path) == [name]


# export_saved_model on a user's files

# Backends (and tf-keras) that write SavedModels.
CAN_EXPORT = LEGACY or BACKEND in EXPORT_BACKENDS
exporting = pytest.mark.skipif(
    not CAN_EXPORT, reason=f"{BACKEND} writes no SavedModels"
)
# Deciding that an export serves its model: float32 outputs of a Dense head
# on the encoding may differ by a few ulps between Keras and the SavedModel.
SAME = 1e-6


def _model(mode="compute", seed=0):
    """features [batch, length, 8] -> encoding -> Dense(4), seeded weights."""
    initializer = keras.initializers.RandomNormal(seed=seed)
    head = keras.layers.Dense(4, kernel_initializer=initializer, name="head")
    options = {"max_length": 64} if mode == "lookup" else {}
    inputs = keras.Input(shape=(None, 8))
    encoding = SinusoidalPositionEncoding(mode=mode, **options)
    return keras.Model(inputs, head(encoding(inputs)))


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Per mode: a model and its export_saved_model SavedModel."""
    if not CAN_EXPORT:
        pytest.skip(f"{BACKEND} writes no SavedModels")
    folder = tmp_path_factory.mktemp("exports")
    return {
        mode: (model, export_saved_model(model, folder / mode))
        for mode, model in [("compute", _model()), ("lookup", _model("lookup", 1))]
    }


@pytest.mark.parametrize("path", [None, 123, b"export"], ids=["None", "int", "bytes"])
def test_export_path_must_be_a_str_or_path(tmp_path, path):
    # A TypeError naming `path`, on every backend, before anything else.
    with pytest.raises(
        TypeError,
        match=r"invalid value for `path`.*Received: path=" + re.escape(repr(path)),
    ):
        export_saved_model(_model(), path, overwrite=True)


def test_export_overwrite_must_be_a_bool(tmp_path):
    # overwrite="yes" is a ValueError naming `overwrite`; nothing is written.
    with pytest.raises(
        ValueError, match=r"`overwrite`, expected a bool\. Received: overwrite='yes'"
    ):
        export_saved_model(_model(), tmp_path / "export", overwrite="yes")
    assert os.listdir(tmp_path) == []


def _user_files(root):
    """A directory tree of someone's files, fake SavedModel marker included."""
    (root / "project" / "src").mkdir(parents=True)
    for name in ["notes.txt", "project/data.csv", "project/src/main.py"]:
        (root / name).write_text(f"{name}: keep me\n")
    for folder in ["", "project", "project/src"]:
        (root / folder / "saved_model.pb").write_bytes(b"not really")
    os.chmod(root / "notes.txt", 0o600)


def test_export_refuses_an_empty_path(tmp_path, monkeypatch):
    # "" is refused with overwrite=True (never read as the current directory).
    _user_files(tmp_path)
    monkeypatch.chdir(tmp_path / "project")
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError) as raised:
        export_saved_model(_model(), "", overwrite=True)
    assert str(raised.value) == (
        "Received an invalid value for `path`, expected a non-empty str or "
        "os.PathLike path. Received: path=''"
    )
    assert _snapshot(tmp_path) == before


@exporting
@pytest.mark.parametrize(
    "target, reason",
    [
        (".", "it is the current directory or one of its ancestors"),
        ("..", "it is the current directory or one of its ancestors"),
        ("{cwd}", "it is the current directory or one of its ancestors"),
        ("{home}", "it is the home directory"),
    ],
    ids=["dot", "parent", "cwd", "home"],
)
def test_export_never_replaces_cwd_its_ancestors_or_home(
    tmp_path, monkeypatch, target, reason
):
    # Even holding a saved_model.pb and with overwrite=True: a one-line
    # ValueError naming the path, and every file untouched byte for byte.
    home = tmp_path / "home"
    home.mkdir()
    _user_files(home)
    cwd = home / "project" / "src"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    path = target.format(cwd=cwd, home=home)
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError) as raised:
        export_saved_model(_model(), path, overwrite=True)
    message = str(raised.value)
    assert message == f"Refusing to overwrite {os.path.abspath(path)!r}: {reason}."
    assert "\n" not in message
    assert _snapshot(tmp_path) == before


@exporting
def test_export_never_replaces_the_root_directory():
    # "/" is refused by name, with overwrite=True.
    with pytest.raises(ValueError, match=r"^Refusing to overwrite '/': it is the root"):
        export_saved_model(_model(), "/", overwrite=True)


@exporting
@pytest.mark.parametrize("kind", ["directory", "file", "symlink"])
def test_overwrite_replaces_only_a_saved_model_directory(tmp_path, kind):
    # With overwrite=True a directory without saved_model.pb, a file, or a
    # symlink (even to a SavedModel) is refused; nothing changes.
    _user_files(tmp_path / "real")
    (tmp_path / "real" / "project" / "saved_model.pb").unlink()
    target = {
        "directory": tmp_path / "real" / "project",
        "file": tmp_path / "real" / "notes.txt",
        "symlink": tmp_path / "link",
    }[kind]
    if kind == "symlink":
        os.symlink(tmp_path / "real", target)
    reason = {
        "directory": r"it is not a SavedModel directory \(no saved_model\.pb inside\)",
        "file": r"it is not a SavedModel directory",
        "symlink": r"it is a symlink",
    }[kind]
    before = _snapshot(tmp_path)
    refusal = rf"^Refusing to overwrite '{re.escape(str(target))}': {reason}"
    with pytest.raises(ValueError, match=refusal):
        export_saved_model(_model(), target, overwrite=True)
    assert _snapshot(tmp_path) == before


@exporting
@pytest.mark.parametrize("kind", ["saved_model", "empty", "file"])
def test_export_never_overwrites_unasked(tmp_path, kind):
    # Without overwrite, any existing path is a FileExistsError naming the
    # way to replace it, and stays as it was.
    target = tmp_path / "export"
    if kind == "file":
        target.write_text("mine")
    else:
        target.mkdir()
        if kind == "saved_model":
            (target / "saved_model.pb").write_bytes(b"old")
    before = _snapshot(tmp_path)
    with pytest.raises(
        FileExistsError,
        match=rf"^Refusing to replace the existing path '{re.escape(str(target))}'"
        r"\. Pass overwrite=True",
    ):
        export_saved_model(_model(), target)
    assert _snapshot(tmp_path) == before


@exporting
def test_exported_files_follow_the_umask(tmp_path, exports):
    # Under umask 022 the export is 0755 directories and 0644 files, like
    # model.export writes (not the 0700 of a private temporary directory).
    old = os.umask(0o022)
    try:
        path = export_saved_model(exports["compute"][0], tmp_path / "export")
    finally:
        os.umask(old)
    modes = {name: mode for name, (mode, _) in _snapshot(path).items()}
    assert oct(os.stat(path).st_mode & 0o777) == "0o755"
    for name, mode in modes.items():
        expected = "0o40755" if os.path.isdir(os.path.join(path, name)) else "0o100644"
        assert mode == expected, name


@exporting
def test_overwrite_replaces_an_export_without_a_gap(tmp_path, exports):
    # overwrite=True swaps in the new export in one step (renameat2
    # RENAME_EXCHANGE where the filesystem has it): a reader polling
    # saved_model.pb during the export never misses it; no debris is left.
    old_model, old_path = exports["compute"]
    new_model = exports["lookup"][0]
    path = tmp_path / "export"
    shutil.copytree(old_path, path)
    missing, done = [], threading.Event()

    def read():
        while not done.is_set():
            if not os.path.isfile(path / "saved_model.pb"):
                missing.append(True)
            time.sleep(0)  # let the export run

    reader = threading.Thread(target=read)
    reader.start()
    try:
        export_saved_model(new_model, path, overwrite=True)
    finally:
        done.set()
        reader.join()
    if _renames.exchange_supported(tmp_path):  # else two renames: a short gap
        assert not missing
    x = random_inputs(2, 9)
    assert max_diff(serve(path, x), to_numpy(new_model(x))) <= SAME
    assert max_diff(to_numpy(new_model(x)), to_numpy(old_model(x))) > 1e-3
    assert os.listdir(tmp_path) == ["export"]


def _fail_midway(monkeypatch, model):
    """Makes the export write a partial saved_model.pb, then fail."""

    def failing(self, filepath, *args, **kwargs):
        with open(os.path.join(filepath, "saved_model.pb"), "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(type(model), "save" if LEGACY else "export", failing)


@exporting
def test_failed_overwrite_keeps_the_old_export(tmp_path, exports, monkeypatch):
    # A write that fails midway leaves the old export byte for byte, still
    # serving, and no staging debris beside it.
    model, old_path = exports["compute"]
    path = tmp_path / "export"
    shutil.copytree(old_path, path)
    before = _snapshot(tmp_path)
    _fail_midway(monkeypatch, model)
    with pytest.raises(OSError, match="disk full"):
        export_saved_model(model, path, overwrite=True)
    monkeypatch.undo()
    assert _snapshot(tmp_path) == before
    x = random_inputs(1, 5)
    assert max_diff(serve(path, x), to_numpy(model(x))) <= SAME


@exporting
def test_failed_export_leaves_nothing(tmp_path, exports, monkeypatch):
    # A new export that fails midway leaves no path and no debris.
    model = exports["compute"][0]
    _fail_midway(monkeypatch, model)
    with pytest.raises(OSError, match="disk full"):
        export_saved_model(model, tmp_path / "export")
    assert os.listdir(tmp_path) == []


@exporting
def test_export_returns_the_absolute_path(tmp_path, monkeypatch, exports):
    # A relative path is resolved against the current directory and returned.
    monkeypatch.chdir(tmp_path)
    path = export_saved_model(exports["lookup"][0], "relative")
    assert path == str(tmp_path / "relative")
    assert os.path.isfile(os.path.join(path, "saved_model.pb"))


@exporting
def test_export_publishes_a_230_character_name(tmp_path, exports):
    # A 230-character export name is published and serves its model (its
    # staging name once passed 255 bytes and failed with ENAMETOOLONG).
    model = exports["compute"][0]
    path = export_saved_model(model, tmp_path / ("e" * 230))
    x = random_inputs(1, 5)
    assert max_diff(serve(path, x), to_numpy(model(x))) <= SAME
    assert os.listdir(tmp_path) == ["e" * 230]


# export_encoder on a user's files


@only_tensorflow
def test_export_encoder_replaces_only_when_asked(tmp_path):
    # An existing encoder is refused without overwrite and replaced with it.
    import tensorflow as tf

    path = export_encoder(tmp_path / "encoder", 4)
    before = _snapshot(tmp_path)
    with pytest.raises(FileExistsError, match=r"Refusing to replace .*overwrite=True"):
        export_encoder(path, 6)
    assert _snapshot(tmp_path) == before
    export_encoder(path, 6, overwrite=True)
    assert encode_positions(tf.saved_model.load(path), [[1]]).shape == (1, 1, 6)
    assert os.listdir(tmp_path) == ["encoder"]
