"""Tests of the atomic, crash-safe directory and file publication."""

import errno
import importlib.util
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

# The module is stdlib only: loading it by path lets these tests run without
# TensorFlow (which `keras_posenc/__init__.py` imports) and lets the killed
# subprocesses below start in milliseconds.
SOURCE = Path(__file__).resolve().parents[1] / "keras_posenc" / "_files.py"
_spec = importlib.util.spec_from_file_location("keras_posenc_files", SOURCE)
_files = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_files)

LOAD = """
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("files", sys.argv[1])
files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(files)
"""


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


def _listing(parent):
    # The fallback's `.{name}.lock` stays by design: unlinking a lock file
    # lets two writers hold "the" lock at once.
    return sorted(e for e in os.listdir(parent) if not e.endswith(".lock"))


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write(directory, content=b"new graph"):
    Path(directory, "saved_model.pb").write_bytes(content)


@pytest.fixture(params=["renameat2", "fallback"])
def rename_mode(request, tmp_path, monkeypatch):
    if request.param == "fallback":
        # Stands in for a kernel, libc or filesystem without renameat2.
        monkeypatch.setattr(_files, "_rename2", lambda *args: False)
    elif not _files.exchange_supported(tmp_path):
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

    monkeypatch.setattr(_files, "_rename2", failing_rename2)
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
    monkeypatch.setattr(_files, "_rename2", lambda *args: False)
    real_rename = os.rename

    def rename(src, dst):
        if ".model.partial-" in os.path.basename(src):
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


@pytest.mark.skipif(_files._libc_renameat2 is None, reason="no renameat2 in libc")
def test_renameat2_errors_name_the_destination(tmp_path):
    # An errno other than EEXIST or "unsupported" is an OSError naming `dst`.
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "dst"))):
        _files._rename2(
            tmp_path / "missing", tmp_path / "dst", _files._RENAME_NOREPLACE
        )


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

    threads = [threading.Thread(target=export, args=(label,)) for label in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (winner,) = [label for label, outcome in outcomes.items() if outcome == "published"]
    (loser,) = {"a", "b"} - {winner}
    assert "Pass overwrite=True (or --overwrite)" in outcomes[loser]
    assert _tree(tmp_path / "model") == {"saved_model.pb": winner.encode()}
    assert _listing(tmp_path) == ["model"]


def test_exchange_supported_leaves_nothing_behind(tmp_path):
    # The probe answers a bool and removes its two probe directories.
    assert isinstance(_files.exchange_supported(tmp_path), bool)
    assert os.listdir(tmp_path) == []


# Recovery of what killed runs left


def test_recovery_removes_a_dead_writers_partial(tmp_path):
    # `.{name}.partial-{dead pid}-*` is removed by the next export.
    (tmp_path / f".model.partial-{_dead_pid()}-x").mkdir()
    with _files.atomic_directory(tmp_path / "model") as staging:
        _write(staging)
    assert _listing(tmp_path) == ["model"]


def test_recovery_restores_a_dead_writers_old_when_path_is_missing(tmp_path):
    # `.{name}.old-{dead pid}-*` without `path` is the old export stranded
    # mid-swap: it is put back (so a no-overwrite export is then refused).
    old = _saved_model(tmp_path / f".model.old-{_dead_pid()}-x")
    before = _tree(old)
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    assert _tree(tmp_path / "model") == before
    assert _listing(tmp_path) == ["model"]


def test_recovery_removes_a_dead_writers_old_when_path_exists(tmp_path):
    # With `path` in place, a dead writer's `.old-` is a leftover: removed.
    _saved_model(tmp_path / f".model.old-{_dead_pid()}-x")
    _saved_model(tmp_path / "model", b"current")
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    assert _tree(tmp_path / "model")["saved_model.pb"] == b"current"
    assert _listing(tmp_path) == ["model"]


def test_recovery_spares_a_live_writers_debris(tmp_path):
    # Debris of a live pid is a concurrent export at work: left alone.
    live = [f".model.partial-{os.getpid()}-x", f".model.old-{os.getpid()}-x"]
    for name in live:
        (tmp_path / name).mkdir()
    with _files.atomic_directory(tmp_path / "model") as staging:
        _write(staging)
    assert _listing(tmp_path) == sorted(live + ["model"])


def test_recovery_spares_other_names(tmp_path):
    # Only debris of the same name is recovered; `other`'s is not this run's.
    other = f".other.partial-{_dead_pid()}-x"
    (tmp_path / other).mkdir()
    with _files.atomic_directory(tmp_path / "model") as staging:
        _write(staging)
    assert _listing(tmp_path) == [other, "model"]


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
    command = [sys.executable, "-c", script, str(SOURCE), str(tmp_path / "model")]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"staged\n"
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return proc.pid


def test_kill_9_mid_export_keeps_the_old_export(tmp_path):
    # A kill -9 while staging leaves the old export byte for byte (and its
    # staging directory as evidence of the crash).
    _saved_model(tmp_path / "model")
    before = _tree(tmp_path / "model")
    pid = _killed_export(tmp_path)
    assert _tree(tmp_path / "model") == before
    debris, _ = _listing(tmp_path)
    assert debris.startswith(f".model.partial-{pid}-")


def test_next_export_cleans_what_a_kill_9_left(tmp_path):
    # The next export removes the killed run's staging directory.
    _saved_model(tmp_path / "model")
    _killed_export(tmp_path)
    with _files.atomic_directory(tmp_path / "model", overwrite=True) as staging:
        _write(staging)
    assert _listing(tmp_path) == ["model"]


def test_kill_9_between_the_fallback_renames_is_restored(tmp_path):
    # Without renameat2, a kill between `rename(path -> old)` and
    # `rename(staging -> path)` leaves no `path`; the next export restores it.
    script = LOAD + textwrap.dedent(
        """
        files._rename2 = lambda *args: False
        real_rename = os.rename
        def rename(src, dst):
            if ".model.partial-" in os.path.basename(src):
                os.kill(os.getpid(), signal.SIGKILL)
            real_rename(src, dst)
        os.rename = rename
        with files.atomic_directory(sys.argv[2], overwrite=True) as staging:
            open(os.path.join(staging, "saved_model.pb"), "wb").write(b"new")
        """
    )
    _saved_model(tmp_path / "model")
    before = _tree(tmp_path / "model")
    command = [sys.executable, "-c", script, str(SOURCE), str(tmp_path / "model")]
    assert subprocess.run(command).returncode == -signal.SIGKILL
    assert not (tmp_path / "model").exists()
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        with _files.atomic_directory(tmp_path / "model") as staging:
            _write(staging)
    assert _tree(tmp_path / "model") == before
    assert _listing(tmp_path) == ["model"]


# atomic_file


def test_file_publishes_a_new_file(tmp_path):
    # The written temporary file appears at `path`; nothing else is left.
    with _files.atomic_file(tmp_path / "pe.png") as temp:
        Path(temp).write_bytes(b"png")
    assert (tmp_path / "pe.png").read_bytes() == b"png"
    assert _listing(tmp_path) == ["pe.png"]


def test_file_refuses_an_existing_file_without_overwrite(tmp_path):
    # An existing file is kept byte for byte unless overwrite is asked for.
    (tmp_path / "pe.png").write_bytes(b"old")
    with pytest.raises(FileExistsError, match="Pass overwrite=True"):
        with _files.atomic_file(tmp_path / "pe.png") as temp:
            Path(temp).write_bytes(b"new")
    assert (tmp_path / "pe.png").read_bytes() == b"old"
    assert _listing(tmp_path) == ["pe.png"]


def test_file_overwrites_a_regular_file(tmp_path):
    # With overwrite a regular file is replaced in one rename.
    (tmp_path / "pe.png").write_bytes(b"old")
    with _files.atomic_file(tmp_path / "pe.png", overwrite=True) as temp:
        Path(temp).write_bytes(b"new")
    assert (tmp_path / "pe.png").read_bytes() == b"new"
    assert _listing(tmp_path) == ["pe.png"]


def test_file_never_overwrites_a_directory(tmp_path):
    # Even with overwrite, a directory at the file's path is refused intact.
    (tmp_path / "pe.png").mkdir()
    (tmp_path / "pe.png" / "keep.txt").write_bytes(b"keep")
    with pytest.raises(ValueError, match="it is not a regular file"):
        with _files.atomic_file(tmp_path / "pe.png", overwrite=True) as temp:
            Path(temp).write_bytes(b"new")
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
            rf"\.pe\.png\.partial-{os.getpid()}-\w+\.png", os.path.basename(temp)
        )


def test_file_mode_follows_the_umask(tmp_path):
    # Like a plain open(): 0o666 & ~umask, not mkstemp's 0600.
    previous = os.umask(0o022)
    try:
        with _files.atomic_file(tmp_path / "pe.png") as temp:
            Path(temp).write_bytes(b"png")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "pe.png").stat().st_mode) == 0o644


def test_file_cleans_a_dead_writers_temporary(tmp_path):
    # A killed writer's `.pe.png.partial-{pid}-*.png` goes with the next write.
    (tmp_path / f".pe.png.partial-{_dead_pid()}-x.png").write_bytes(b"half")
    with _files.atomic_file(tmp_path / "pe.png") as temp:
        Path(temp).write_bytes(b"png")
    assert _listing(tmp_path) == ["pe.png"]
