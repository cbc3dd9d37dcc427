"""Shared test helpers: the independent references, tolerances, builders.

Also what more than one test module needs: markers, shared messages and
RoPE scalings, SavedModel runners and the environment of a fresh interpreter.

The references live here only: a float64 numpy formula written straight
from the paper (exact to ~1e-9 below 2**24), and an mpmath one for
positions up to 2**31 where float64 angles are no longer exact. Neither
uses any keras_posenc code.
"""

import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from keras import backend, ops

from keras_posenc._keras import LEGACY, keras

BACKEND = backend.backend()
# The checkout: fresh interpreters import this copy of keras_posenc.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTS = ("interleaved", "concatenated", "cos_sin")
# The tested precision bound of every float32 output (README "Guarantee").
TOL = 2e-7
MODES = [
    pytest.param({"mode": "compute"}, id="compute"),
    pytest.param({"mode": "lookup", "max_length": 128}, id="lookup"),
]

only_tensorflow = pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow only")
only_jax = pytest.mark.skipif(BACKEND != "jax", reason="JAX only")
keras3_only = pytest.mark.skipif(LEGACY, reason="Keras 3 only")
# A JAX or torch machine without TensorFlow (the lent GPU machine cannot
# carry its wheel): what writes or reads a SavedModel skips there.
needs_tensorflow = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="needs TensorFlow, not installed here",
)

# Well under a second: size checks run before any allocation or host work.
FAST = 1.0
# The refusal of a lookup table over KERAS_POSENC_MAX_TABLE_BYTES.
TABLE_MESSAGE = (
    r"`max_length`, expected a table of at most \d+ bytes "
    r"\(set KERAS_POSENC_MAX_TABLE_BYTES to allow more\); "
    r"this one needs (\d+) bytes at depth (\d+)"
)
# RoPE scalings shared by the configuration and the layer tests.
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
MROPE = {"rope_type": "default", "mrope_section": [1, 1, 2]}


def to_numpy(x):
    return ops.convert_to_numpy(x)


def tensor_of(value, dtype):
    """A backend scalar or array tensor of `dtype` holding `value` exactly."""
    return ops.convert_to_tensor(np.array(value, dtype), dtype)


def exact(message):
    """A `pytest.raises(match=...)` pattern for exactly `message`."""
    return "^" + re.escape(message) + "$"


def invalid_value(name, expected, value):
    """The whole Keras-style refusal of `name` (house rule 5): `value` as
    the message shows it."""
    return (
        f"Received an invalid value for `{name}`, expected {expected}. "
        f"Received: {name}={value}"
    )


def traced(fn, jit_compile=False):
    """`fn` as a TF function (on TensorFlow) or under `jax.jit` (on JAX)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=jit_compile, autograph=False)
    import jax

    return jax.jit(fn)


def serve(path_or_loaded, x):
    """Runs a SavedModel's `serving_default` signature on `x`."""
    import tensorflow as tf

    loaded = (
        tf.saved_model.load(os.fspath(path_or_loaded))
        if isinstance(path_or_loaded, (str, os.PathLike))
        else path_or_loaded
    )
    serve = loaded.signatures["serving_default"]
    (name,) = serve.structured_input_signature[1]
    (out,) = serve(**{name: tf.constant(x)}).values()
    return out.numpy()


def encode_positions(loaded, positions):
    """Runs an `export_encoder` SavedModel's `serving_default` on positions."""
    import tensorflow as tf

    signature = loaded.signatures["serving_default"]
    return signature(positions=tf.constant(positions, tf.int32))["encoding"].numpy()


def run_python(code, *args, **options):
    """`python -c code args...` in a fresh interpreter, its output captured
    as text (`subprocess.run`; `options` such as `env`, `cwd`, `check`)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, **options
    )


def keras_file_round_trip(model, path):
    """`model` saved as the `.keras` file `path`, and loaded back."""
    model.save(str(path))
    return keras.saving.load_model(str(path))


def assert_layer_round_trips(model, layer, x, tmp_path):
    """Saves `model` (which holds `layer`) as a `.keras` file and loads it:
    the loaded layer (found by `layer`'s name) has `layer`'s class and
    config, and the loaded model's output on `x` is the model's, bit for
    bit. Returns the loaded layer."""
    loaded = keras_file_round_trip(model, tmp_path / "model.keras")
    again = loaded.get_layer(layer.name)
    assert isinstance(again, type(layer))
    assert again.get_config() == layer.get_config()
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))
    return again


def max_diff(a, b):
    """The largest absolute difference in float64 (0 for empty arrays)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.float64) - b).max()) if a.size else 0.0


def reference(positions, depth, max_wavelength=10000.0, layout="interleaved"):
    """float64 PE straight from the paper: `positions.shape + (depth,)`."""
    positions = np.asarray(positions, np.float64)
    i = np.arange((depth + 1) // 2)
    omega = max_wavelength ** (-2.0 * i / depth)
    angle = positions[..., None] * omega
    sin, cos = np.sin(angle), np.cos(angle)[..., : depth // 2]
    if layout == "concatenated":
        return np.concatenate([sin, cos], axis=-1)
    if layout == "cos_sin":  # ceil(depth / 2) cosines, then the sines
        return np.concatenate([np.cos(angle), sin[..., : depth // 2]], axis=-1)
    out = np.empty(positions.shape + (depth,))
    out[..., 0::2] = sin
    out[..., 1::2] = cos
    return out


# -- published 1-D tables, transcribed in float64 from transformers 5.24 -----


def fairseq_positions(ids, padding_id, cache_length=0):
    """fairseq's `make_positions` (M2M100's `create_position_ids_from_input_ids`)."""
    mask = (np.asarray(ids) != padding_id).astype(np.int64)
    return (np.cumsum(mask, axis=1) + cache_length) * mask + padding_id


def tensor2tensor_table(positions, depth, padding_id=None, cos_first=False, base=1e4):
    """fairseq's `get_embedding` (M2M100, NLLB, XGLM, Speech2Text, TrOCR,
    Kosmos-2, SeamlessM4T), MusicGen's (`cos_first`), Whisper's `sinusoids`
    and PEGASUS-X's, in float64: ``b**(-i / (d//2 - 1))``, ``[sin | cos]``
    of ``d // 2`` frequencies, a zero column for an odd ``d``, the padding
    row zero."""
    positions = np.asarray(positions, np.float64)
    half = depth // 2
    step = np.log(base) / (half - 1)
    angle = positions[..., None] * np.exp(np.arange(half) * -step)
    halves = (
        [np.cos(angle), np.sin(angle)] if cos_first else [np.sin(angle), np.cos(angle)]
    )
    if depth % 2:
        halves.append(np.zeros(angle.shape[:-1] + (1,)))
    out = np.concatenate(halves, axis=-1)
    if padding_id is not None:
        out[positions == padding_id] = 0.0
    return out


def paper_table(positions, depth, interleaved=False):
    """Marian's, Pegasus's, CTRL's and the time-series models' `[sin | cos]`
    (`ceil(d / 2)` sines first), or DistilBERT's and XLM's interleaved table:
    ``pos / 10000 ** (2 * (j // 2) / d)`` in float64."""
    positions = np.asarray(positions, np.float64)
    j = np.arange(depth)
    angle = positions[..., None] / np.power(10000.0, 2 * (j // 2) / depth)
    if interleaved:
        out = np.empty_like(angle)
        out[..., 0::2] = np.sin(angle[..., 0::2])
        out[..., 1::2] = np.cos(angle[..., 1::2])
        return out
    return np.concatenate([np.sin(angle[..., 0::2]), np.cos(angle[..., 1::2])], -1)


def reference_mp(positions, depth, max_wavelength=10000.0, layout="interleaved"):
    """The same with 40-digit mpmath arithmetic (slow: use few positions)."""
    import mpmath

    mpmath.mp.dps = 40 + max(0, int(-mpmath.log10(max_wavelength)))
    rows = []
    for p in np.ravel(positions):
        sin, cos = [], []
        for i in range((depth + 1) // 2):
            angle = int(p) * mpmath.power(
                mpmath.mpf(max_wavelength), mpmath.mpf(-2 * i) / depth
            )
            sin.append(float(mpmath.sin(angle)))
            cos.append(float(mpmath.cos(angle)))
        if layout == "cos_sin":
            rows.append(cos + sin[: depth // 2])
            continue
        cos = cos[: depth // 2]
        if layout == "concatenated":
            rows.append(sin + cos)
        else:
            row = [0.0] * depth
            row[0::2], row[1::2] = sin, cos
            rows.append(row)
    return np.array(rows).reshape(np.shape(positions) + (depth,))


def subprocess_env(backend="tensorflow", legacy=False, **extra):
    """A quiet environment for a fresh interpreter on `backend`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KERAS_BACKEND", "TF_USE_LEGACY_KERAS", "XLA_FLAGS")
    }
    env.update(
        KERAS_BACKEND=backend,
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONPATH=os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")])),
    )
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    env.update(extra)
    return env


def on_host_only(env):
    """`env` for a subprocess that measures the host: no GPU (a lent GPU
    machine has one), so JAX's devices are the CPU's (the count
    `--xla_force_host_platform_device_count` asks for) and the process's
    resident memory holds what it keeps."""
    return {**env, "CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"}


def random_inputs(batch=2, length=10, depth=8, seed=0):
    """float32 numpy inputs `[batch, length, depth]`."""
    return (
        np.random.default_rng(seed)
        .normal(size=(batch, length, depth))
        .astype("float32")
    )


def data_dependent_conditionals(module):
    """`stablehlo.case`/`if` ops of an MLIR module whose index comes from data.

    A conditional over a constant, or over a chain of such conditionals (what
    `jax.lax.platform_dependent` emits for one platform), is folded by XLA
    and costs nothing; any other index is computed from the inputs.
    """
    found = []
    for function in re.split(r"\n\s*func\.func ", module):
        defined = {}
        for line in function.splitlines():
            match = re.match(r"\s*(%[\w.]+)(?::\d+)? = (.*)", line)
            if match:
                defined[match.group(1)] = match.group(2)

        def constant(name, seen=(), defined=defined):
            definition = defined.get(name.split("#")[0], "")
            if definition.startswith("stablehlo.constant"):
                return True
            index = re.match(r'"stablehlo\.case"\((%[\w.#]+)\)', definition)
            return (
                bool(index)
                and name not in seen
                and constant(index.group(1), (*seen, name))
            )

        for name, definition in defined.items():
            index = re.match(r'"stablehlo\.(?:case|if)"\((%[\w.#]+)', definition)
            if index and not constant(index.group(1)):
                found.append(f"{name} = {definition[:80]}")
    return found


def float_divisions(module):
    """The float32 `stablehlo.divide` ops of an MLIR module: how
    `keras_posenc._platform` writes a table once on a CPU under XLA."""
    return re.findall(r"stablehlo\.divide [^\n]*xf32>", module)


__all__ = [
    "BACKEND",
    "FAST",
    "LAYOUTS",
    "LEGACY",
    "LLAMA3",
    "MODES",
    "MROPE",
    "ROOT",
    "TABLE_MESSAGE",
    "TOL",
    "data_dependent_conditionals",
    "float_divisions",
    "encode_positions",
    "exact",
    "fairseq_positions",
    "keras",
    "keras3_only",
    "needs_tensorflow",
    "max_diff",
    "only_jax",
    "only_tensorflow",
    "random_inputs",
    "reference",
    "reference_mp",
    "serve",
    "subprocess_env",
    "on_host_only",
    "paper_table",
    "tensor2tensor_table",
    "tensor_of",
    "to_numpy",
    "traced",
]
