"""What the command line does to its own process: quiet Keras imports, Ctrl-C.

A command is the whole process when run as `keras-posenc`: native log
lines printed while TensorFlow loads are hidden, an interrupt gives one
line and status 130, and errors become their first line. Nothing here
knows the commands (`keras_posenc.cli`).
"""

import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType, ModuleType
from typing import Any

from keras_posenc import _tensorflow, demo

INTERRUPTED = 130


@contextlib.contextmanager
def _native_stderr_silenced(silence: bool) -> Iterator[int]:
    """Sends file descriptor 2 to /dev/null while `silence` is true.

    TensorFlow's libraries log through absl before anything can configure
    it ("All log messages before absl::InitializeLog() ...", "Could not
    find cuda drivers"), once per library, whatever TF_CPP_MIN_LOG_LEVEL
    says; only the file descriptor can hide them.

    Yields:
        A file descriptor of the real stderr.
    """
    if not silence:
        yield 2
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield saved
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _interrupt_exits_now(prog: str, stderr_fd: int) -> Iterator[None]:
    """Ctrl-C ends the process at once while native libraries load.

    An exception raised inside the initialisation of a native module
    (jaxlib under TensorFlow's import, for one) can crash the process
    while it unwinds; nothing has been written yet, so exiting without
    unwinding loses nothing. Only over `_interrupt_once` (the whole
    process is the command line), never for a caller of `main(argv)`.
    """
    if signal.getsignal(signal.SIGINT) is not _interrupt_once:
        yield
        return

    def exit_now(signum: int, frame: FrameType | None) -> None:
        os.write(stderr_fd, f"{prog}: interrupted\n".encode())
        os._exit(INTERRUPTED)

    signal.signal(signal.SIGINT, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _interrupt_once)


def load_keras(prog: str, tensorflow: bool = False) -> ModuleType:
    """Imports Keras for the configured backend, quietly; returns its backend.

    Called once the arguments are read, so that `--help` and usage errors
    never wait for TensorFlow. TF_CPP_MIN_LOG_LEVEL defaults to 3 (errors
    hidden too: the CLI reports its own), in this process and in those it
    starts; native log lines printed while importing are hidden unless it
    is 0. A bad `KERAS_BACKEND` or a tf-keras set-up that cannot work is
    one line.

    With `tensorflow`, TensorFlow is imported here too where it is
    installed, whatever the backend: for a command that would import it
    later (Keras's `set_random_seed` does on every backend, a SavedModel
    export from JAX does), where nothing could hide its start-up lines.
    """
    level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # The lines TensorFlow cannot filter are informational: show them only
    # to whoever asked for every log line.
    with (
        _native_stderr_silenced(level.strip() != "0") as stderr_fd,
        _interrupt_exits_now(prog, stderr_fd),
    ):
        try:
            from keras import backend

            from keras_posenc import _keras  # refuses tf-keras without TensorFlow

            if tensorflow and _tensorflow.installed():
                importlib.import_module("tensorflow")
        except ModuleNotFoundError as error:
            if _tensorflow.is_missing(error):
                raise ImportError(_tensorflow.NOT_INSTALLED_AS_BACKEND) from None
            raise ImportError(first_line(error)) from None
        except ImportError as error:
            raise ImportError(first_line(error)) from None
        except Exception as error:
            name = os.environ.get("KERAS_BACKEND")
            setting = f"KERAS_BACKEND={name!r}" if name else "the configured backend"
            raise ImportError(
                f"Keras cannot start with {setting}: {first_line(error)}"
            ) from None
    del _keras
    return backend


# Errors whose message is meant for the user as it is; others are named.
_PLAIN = (ValueError, TypeError, OSError, ImportError, demo.DidNotLearn)


def first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    name = type(error).__name__
    if not lines:
        return name
    return lines[0] if isinstance(error, _PLAIN) else f"{name}: {lines[0]}"


def _interrupt_once(signum: int, frame: FrameType | None) -> None:
    """The first Ctrl-C raises KeyboardInterrupt; later ones are ignored.

    So an interrupt while the first one unwinds (or while Python exits)
    cannot add a second message or a traceback.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def install_interrupt_handler() -> Any:
    """Installs `_interrupt_once` for Ctrl-C; returns the handler it replaced.

    Only from the main thread, and only over Python's default handler (an
    application embedding `main` keeps its own). Returns None when nothing
    was installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
        return None
    signal.signal(signal.SIGINT, _interrupt_once)
    return previous


def report_interrupt(prog: str = "keras-posenc") -> int:
    """Prints the one line of an interrupted command; returns status 130."""
    print(f"{prog}: interrupted", file=sys.stderr)
    return INTERRUPTED
