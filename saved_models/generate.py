"""Writes the committed reference SavedModel that tests/test_export.py reloads.

Run from the repository root with Keras 3: `python saved_models/generate.py`.
A new version adds a new folder; old folders are never rewritten: they are
what users of that version exported, and every later version must load them.
"""

import os
import sys

import numpy as np

import keras_posenc
from keras_posenc._keras import keras


def build_model():
    # Both modes, both layouts, an odd depth and a per-example-free signature.
    inputs = keras.Input(shape=(None, 8), name="features")
    added = keras_posenc.SinusoidalPositionEncoding(name="pe_add")(inputs)
    table = keras_posenc.SinusoidalPositionEncoding(
        mode="lookup",
        max_length=64,
        merge=None,
        depth=5,
        layout="concatenated",
        name="pe_lookup",
    )(inputs)
    return keras.Model(inputs, keras.layers.Concatenate()([added, table]))


def main():
    out = os.path.join(os.path.dirname(__file__), f"v{keras_posenc.__version__}")
    if os.path.exists(out):
        sys.exit(f"{out} exists: old reference exports are never rewritten")
    model = build_model()
    inputs = np.random.default_rng(0).normal(size=(3, 40, 8)).astype("float32")
    keras_posenc.export_saved_model(model, os.path.join(out, "saved_model"))
    np.save(os.path.join(out, "inputs.npy"), inputs)
    np.save(os.path.join(out, "expected.npy"), model.predict(inputs, verbose=0))


if __name__ == "__main__":
    main()
