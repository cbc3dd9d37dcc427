"""A keras-hub Llama's logits near position 10**6: original vs `use_exact`.

    python -m benchmarks.compat_long_positions [--backend tensorflow|jax|torch]

Builds a tiny random-weight keras-hub `LlamaBackbone` (head dim 64,
`rope_max_wavelength=500000`, Llama 3.1's frequency scaling), then runs the
same tokens at positions [p - 64, p) for p = 2**11 and p = 10**6 three
ways: keras-hub's rotary layer (float32 angles), the same model after
`keras_posenc.compat.use_exact` and a float64 reference (the model with
cos and sin computed in float64 numpy from the same frequencies, cast once
to float32). Prints the largest |logit - reference logit| of each, and of
cos and sin themselves (every channel, base 500000, unscaled). The rotary
layers are moved to the far positions by adding p - 64 to their
`start_index` (keras-hub's backbone call starts at 0). Eager, on the
chosen backend.
"""

import argparse
import sys

from benchmarks import _common

if __name__ == "__main__":
    _common.select_backend(sys.argv[1:])

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
from keras import backend  # noqa: E402

from keras_posenc import compat  # noqa: E402

LENGTH = 64
LLAMA3 = {
    "rope_max_wavelength": 500000.0,
    "rope_frequency_adjustment_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_pretraining_sequence_length": 8192,
}


def build(seed=0):
    keras.utils.set_random_seed(seed)
    return keras_hub.models.LlamaBackbone(
        vocabulary_size=256,
        num_layers=2,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=128,
        intermediate_dim=256,
        **LLAMA3,
    )


def inverse_frequencies(dim):
    """Llama 3.1's scaled frequencies, in float64 (transformers' formula)."""
    base, factor = (
        LLAMA3["rope_max_wavelength"],
        LLAMA3["rope_frequency_adjustment_factor"],
    )
    low, high = LLAMA3["rope_low_freq_factor"], LLAMA3["rope_high_freq_factor"]
    orig = LLAMA3["rope_pretraining_sequence_length"]
    inv = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    wavelength = 2 * np.pi / inv
    smooth = (orig / wavelength - low) / (high - low)
    scaled = np.where(wavelength > orig / low, inv / factor, inv)
    medium = (wavelength >= orig / high) & (wavelength <= orig / low)
    return np.where(medium, (1 - smooth) * inv / factor + smooth * inv, scaled)


def cos_sin64(start, dim):
    angle = np.arange(start, start + LENGTH, dtype=np.float64)[:, None]
    angle = angle * inverse_frequencies(dim)
    angle = np.concatenate([angle, angle], -1)
    return np.cos(angle), np.sin(angle)


def shifted(layer, offset, float64=False):
    """`layer` with its positions moved by `offset` (float64 cos/sin if asked)."""
    base = type(layer)

    def call(self, inputs, start_index=0, positions=None):
        if not float64:
            return base.call(self, inputs, start_index=start_index + offset)
        dim = inputs.shape[-1]
        cos, sin = (
            keras.ops.convert_to_tensor(t[None, :, None, :].astype("float32"))
            for t in cos_sin64(offset, dim)
        )
        return self._apply_rotary_pos_emb(inputs, cos, sin)

    layer.__class__ = type(base.__name__, (base,), {"call": call})


def rotary_layers(model):
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if "RotaryEmbedding" in type(layer).__name__
    ]


def logits(model, offset, float64=False):
    for layer in rotary_layers(model):
        shifted(layer, offset, float64)
    tokens = (np.arange(LENGTH)[None] * 7 % 256).astype("int32")
    hidden = model({"token_ids": tokens, "padding_mask": np.ones_like(tokens)})
    out = model.token_embedding(hidden, reverse=True)
    return keras.ops.convert_to_numpy(out).astype(np.float64)


def cos_sin_errors(offset, dim=64):
    """Max |cos, sin - float64| over every channel: keras-hub's, then exact."""
    # Rotating ones gives cos - sin on the first half, cos + sin on the second.
    x = np.ones((1, LENGTH, 1, dim), "float32")
    base = LLAMA3["rope_max_wavelength"]
    angle = np.arange(offset, offset + LENGTH, dtype=np.float64)[:, None]
    angle = angle * base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    errors = []
    for make in (keras_hub.layers.RotaryEmbedding, compat.RotaryEmbedding):
        out = make(max_wavelength=base)(x, start_index=offset)
        out = keras.ops.convert_to_numpy(out)[0, :, 0].astype(np.float64)
        first, second = out[:, : dim // 2], out[:, dim // 2 :]
        cos, sin = (first + second) / 2, (second - first) / 2
        errors.append(
            max(np.abs(cos - np.cos(angle)).max(), np.abs(sin - np.sin(angle)).max())
        )
    return errors


def measure(ends=(2**11, 10**6)):
    rows = []
    for end in ends:
        offset = end - LENGTH
        reference = logits(build(), offset, float64=True)
        original = logits(build(), offset)
        exact_model = build()
        compat.use_exact(exact_model)
        exact = logits(exact_model, offset)
        errors = cos_sin_errors(offset)
        rows.append(
            {
                "p": end,
                "logit scale": float(np.abs(reference).max()),
                "keras-hub": float(np.abs(original - reference).max()),
                "use_exact": float(np.abs(exact - reference).max()),
                "cos/sin keras-hub": float(errors[0]),
                "cos/sin exact": float(errors[1]),
            }
        )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=_common.BACKENDS)
    parser.parse_args(argv)
    name = backend.backend()
    print(_common.machine_line(_common.run_info(name)))
    rows = measure()
    header = list(rows[0])
    table = [[f"{r['p']}"] + [f"{r[k]:.2e}" for k in header[1:]] for r in rows]
    print(f"max |logits - float64-RoPE logits|, positions [p - {LENGTH}, p), {name}")
    print(_common.markdown_table(["p"] + header[1:], table))


if __name__ == "__main__":
    main(sys.argv[1:])
