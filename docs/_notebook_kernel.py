"""A quiet IPython kernel for the notebooks the site build and the tests run.

Two kinds of noise would land on the notebook pages otherwise:

* native log lines of TensorFlow's start-up ("All log messages before
  absl::InitializeLog() ...", "Could not find cuda drivers ..."), which
  TF_CPP_MIN_LOG_LEVEL cannot hide. ipykernel copies what the kernel writes
  to its file descriptor 2 into the notebook; here it does not
  (`capture_fd_output`), so they go to the build's terminal, and where
  Keras runs on TensorFlow the kernel imports it first with that
  descriptor closed, so they go nowhere;
* the kernel's own notice that it talks over local TCP, printed once per
  notebook into the build's log.

What a cell prints, Python warnings included, still shows. Stdlib only:
`docs/_hooks.py` and `tests/test_notebooks.py` load this file by path.
"""

import os

# The kernel's settings, in its IPython profile.
KERNEL_CONFIG = """\
c.IPKernelApp.capture_fd_output = False
c.IPKernelApp.log_level = "ERROR"
"""

# Run by the kernel before the notebook's first cell.
STARTUP = """\
import importlib.util
import os

if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow" and (
    importlib.util.find_spec("tensorflow") is not None
):
    _stderr, _null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(_null, 2)
    try:
        import tensorflow
    finally:
        os.dup2(_stderr, 2)
        os.close(_stderr)
        os.close(_null)
    del tensorflow, _stderr, _null
"""


def environment(directory):
    """Writes an IPython profile into `directory`; returns what selects it.

    Args:
        directory: str. An existing, writable directory (the IPython
            directory of the kernels started with the returned variables).

    Returns:
        A dict of environment variables for the process that starts the
        kernels: `IPYTHONDIR`, and `TF_CPP_MIN_LOG_LEVEL=3` (TensorFlow's
        later native lines, such as a failed CUDA start on a machine
        without a GPU, hidden too: with fd capture off they would fill the
        build's log).
    """
    profile = os.path.join(directory, "profile_default")
    os.makedirs(os.path.join(profile, "startup"), exist_ok=True)
    with open(os.path.join(profile, "ipython_kernel_config.py"), "w") as f:
        f.write(KERNEL_CONFIG)
    with open(os.path.join(profile, "startup", "00_quiet_tensorflow.py"), "w") as f:
        f.write(STARTUP)
    return {"IPYTHONDIR": directory, "TF_CPP_MIN_LOG_LEVEL": "3"}
