"""Where TensorFlow is optional: whether it is installed, what to say if not.

TensorFlow is in the default install, but the layers run without it on
JAX and PyTorch (a JAX-only or torch-only install, see the README). What
needs it is a SavedModel, whatever the backend (JAX exports through
jax2tf), and Keras itself when its backend is TensorFlow, its default.
Nothing here imports Keras or TensorFlow, so the command line can ask
before it loads either.
"""

import importlib.util

__all__ = ["NOT_INSTALLED_AS_BACKEND", "installed", "is_missing", "require"]

# What Keras raises at import when its backend is TensorFlow (KERAS_BACKEND
# unset, or keras.json) and TensorFlow is missing: "No module named
# 'tensorflow'", from deep inside Keras.
NOT_INSTALLED_AS_BACKEND = (
    "Keras is set to use TensorFlow (its default backend), which is not "
    "installed: set KERAS_BACKEND=jax or KERAS_BACKEND=torch before Keras is "
    "imported, or `pip install tensorflow`."
)


def installed():
    """Whether the `tensorflow` module can be imported (without importing it)."""
    return importlib.util.find_spec("tensorflow") is not None


def is_missing(error):
    """Whether the ModuleNotFoundError `error` is TensorFlow's absence."""
    name = getattr(error, "name", None) or ""
    return name.split(".")[0] == "tensorflow" and not installed()


def require(what):
    """Raises a ModuleNotFoundError naming `what` unless TensorFlow is installed.

    Args:
        what: str. What writes a SavedModel (a function or a command).

    Raises:
        ModuleNotFoundError: (an ImportError, its `name` "tensorflow") if
            TensorFlow is not installed.
    """
    if not installed():
        raise ModuleNotFoundError(
            f"{what} writes a SavedModel, which needs TensorFlow, and TensorFlow "
            "is not installed: `pip install tensorflow`. A `.keras` file "
            "(`model.save`) needs no TensorFlow and loads on every backend.",
            name="tensorflow",
        )
