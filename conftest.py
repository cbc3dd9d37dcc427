"""Doctest set-up: every `>>>` example in keras_posenc runs in CI.

Examples see `keras`, `keras_posenc` and `np` (as a reader who did
`import keras, keras_posenc, numpy as np` would) and run in a temporary
directory, so an example that writes a file leaves nothing behind.
"""

import os

import numpy as np
import pytest

# Importing it runs the command line.
collect_ignore = ["keras_posenc/__main__.py"]
# The scripts that made the golden files (they need transformers): not tests.
collect_ignore_glob = ["tests/golden/*"]
# keras-hub is Keras 3 only: under tf-keras the drop-ins refuse to be made.
if os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes"):
    collect_ignore.append("keras_posenc/compat")


@pytest.fixture(autouse=True)
def _doctest_namespace(request, doctest_namespace, tmp_path, monkeypatch):
    if isinstance(request.node, pytest.DoctestItem):
        import keras_posenc
        from keras_posenc._keras import keras

        doctest_namespace.update(keras=keras, keras_posenc=keras_posenc, np=np)
        monkeypatch.chdir(tmp_path)
