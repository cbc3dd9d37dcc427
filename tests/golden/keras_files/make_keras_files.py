"""Writes the `.keras` files of one keras_posenc version that every later one must load.

Each released version's layers, saved as users of that version saved them
(a functional model around the layer), with the outputs that version gave
on fixed inputs. `tests/test_keras_files.py` loads every file with today's
package and asserts the same outputs: a file is read as the version that
wrote it meant it.

Run it with the old version first on the path, from a source tree of that
commit (`VERSIONS.md` beside this script lists them), on TensorFlow::

    git archive f255881 keras_posenc | tar -x -C /tmp/old-0.4.0
    KERAS_BACKEND=tensorflow PYTHONPATH=/tmp/old-0.4.0 \
        python tests/golden/keras_files/make_keras_files.py 0.4.0

The argument names the folder (`v<argument>`); an existing folder is never
rewritten. The script uses only what every version has (`keras`, `numpy`
and the layers it finds on `keras_posenc`).
"""

import importlib.util
import os
import sys

import keras
import numpy as np

import keras_posenc

HERE = os.path.dirname(os.path.abspath(__file__))
YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}


def _cases():
    """`(name, input shape, make layer)` of every layer this version has."""
    kp = keras_posenc
    cases = [
        ("sinusoidal_add", (12, 8), lambda: kp.SinusoidalPositionEncoding()),
        (
            "sinusoidal_lookup",
            (12, 8),
            lambda: kp.SinusoidalPositionEncoding(
                mode="lookup",
                max_length=64,
                merge=None,
                depth=5,
                layout="concatenated",
                max_wavelength=500.0,
            ),
        ),
    ]
    if hasattr(kp, "RotaryEmbedding"):
        cases += [
            ("rotary_default", (12, 2, 64), lambda: kp.RotaryEmbedding()),
            # The YaRN default: 0.2 wrote `"truncate": null` for it.
            (
                "rotary_yarn",
                (12, 2, 64),
                lambda: kp.RotaryEmbedding(
                    max_wavelength=10000.0, rope_scaling=dict(YARN)
                ),
            ),
        ]
    if importlib.util.find_spec("keras_posenc.compat") is not None:
        importlib.import_module("keras_posenc.compat")
        # From 0.3.0: an explicit None is transformers' (no truncation).
        cases += [
            (
                "rotary_yarn_truncate_none",
                (12, 2, 64),
                lambda: kp.RotaryEmbedding(rope_scaling={**YARN, "truncate": None}),
            ),
            ("compat_sine", (12, 8), lambda: kp.compat.SinePositionEncoding()),
            (
                "compat_rotary",
                (12, 2, 16),
                lambda: kp.compat.RotaryEmbedding(scaling_factor=2.0),
            ),
        ]
    if hasattr(kp, "TimestepEmbedding"):
        cases += [
            (
                "timestep",
                (),
                lambda: kp.TimestepEmbedding(
                    8, flip_sin_to_cos=True, downscale_freq_shift=0.0
                ),
            ),
            ("grid", (3, 4, 16), lambda: kp.GridPositionEncoding()),
            ("alibi", (4, 3, 5), lambda: kp.AlibiBias()),
        ]
    if hasattr(kp.SinusoidalPositionEncoding, "from_hf_config"):  # 0.5.0
        cases += [
            (
                "sinusoidal_fairseq",
                (12, 9),
                lambda: kp.SinusoidalPositionEncoding(
                    frequency_rule="tensor2tensor",
                    layout="concatenated",
                    odd_depth="zero",
                    position_offset=2,
                ),
            ),
            ("grid_detr", (3, 4, 16), lambda: kp.GridPositionEncoding(sine="detr")),
            (
                "grid_rt_detr",
                (3, 4, 16),
                lambda: kp.GridPositionEncoding(sine="rt_detr", temperature=20.0),
            ),
        ]
    return cases


def _inputs(name, shape):
    rng = np.random.default_rng(len(name))
    if name == "timestep":
        return np.array([0.0, 1.0, 500.5, 999.0], "float32")
    return rng.normal(size=(2, *shape)).astype("float32")


def main():
    label = sys.argv[1]
    out = os.path.join(HERE, f"v{label}")
    if os.path.exists(out):
        sys.exit(f"{out} exists: the files of a version are never rewritten")
    os.makedirs(out)
    for name, shape, make in _cases():
        inputs = keras.Input(shape=shape, name="inputs")
        model = keras.Model(inputs, make()(inputs))
        values = _inputs(name, shape)
        model.save(os.path.join(out, f"{name}.keras"))
        np.savez(
            os.path.join(out, f"{name}.npz"),
            inputs=values,
            outputs=keras.ops.convert_to_numpy(model(values)),
        )
    with open(os.path.join(out, "WRITER.txt"), "w") as file:
        file.write(
            f"keras_posenc {keras_posenc.__version__}, keras {keras.__version__}\n"
        )


if __name__ == "__main__":
    main()
