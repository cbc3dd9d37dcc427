"""`torch.compile` against eager torch on one device: the same bits, or how far apart.

    python -m benchmarks.compile_bits [--device cuda|cpu]
        [--setting default|emulate_precision_casts|no_fp_fusion] [--json PATH]

Issue 52 item 4. On a CPU, Inductor's C++ kernels give eager's bits for
every family. On CUDA they run as Triton kernels, and an H200 run gave
other bits for N-axis RoPE. This script measures how far apart they are,
and which setting gives eager's bits. Each case is a
public layer or function, called eagerly and under `torch.compile` on the
same inputs. For each case it records:

* the share of elements with the same bits;
* the largest difference between compiled and eager;
* where a float64 reference exists, each one's largest error against it.

`--setting` chooses how Inductor compiles:

* `default`: as it comes.
* `emulate_precision_casts`: `torch._inductor.config.emulate_precision_casts`.
  It rounds as eager does between fused ops, and since torch 2.10 it also
  turns off Triton's contraction of a multiply and an add into one FMA.
* `no_fp_fusion`: `TRITON_DEFAULT_FP_FUSION=0`, Triton's own switch for
  FMA contraction. On the H200 it changed no bit of Inductor's kernels.

Each setting runs in its own process with its own compile caches.
"""

import argparse
import json
import os
import sys
import tempfile

SETTINGS = ("default", "emulate_precision_casts", "no_fp_fusion")


def _select(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None)
    parser.add_argument("--setting", choices=SETTINGS, default="default")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    os.environ["KERAS_BACKEND"] = "torch"
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if args.setting == "no_fp_fusion":
        os.environ["TRITON_DEFAULT_FP_FUSION"] = "0"
    # Compiled kernels are cached on disk: a setting must not reuse another's.
    root = os.path.join(tempfile.gettempdir(), f"compile_bits_{args.setting}")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(root, "triton")
    return args


def cases():
    """name -> (fn, inputs, float64 reference of fn's result or None)."""
    import numpy as np
    import torch
    from keras.src.backend.torch.core import get_device

    import keras_posenc
    from benchmarks.device_bits import references

    device = get_device()
    refs = references()
    rng = np.random.default_rng(0)

    def tensor(values):
        return torch.as_tensor(np.asarray(values)).to(device)

    # FLUX's N-axis RoPE: ids [N, 3], axes (16, 56, 56), interleaved.
    ids, flux = refs["rotary_cos_sin_flux"]
    flux_ids = tensor(ids)

    def flux_table(i):
        cos, sin = keras_posenc.rotary_cos_sin(
            i[None], 128, axes_dim=(16, 56, 56), layout="interleaved"
        )
        return torch.cat([cos[0, :, ::2], sin[0, :, ::2]], -1)

    axes_layer = keras_posenc.RotaryEmbedding(axes_dim=(16, 56, 56))
    q_axes = tensor(rng.normal(size=(1, len(ids), 2, 128)).astype("f4"))

    # Llama-style RoPE at long positions, head dim 128, half layout.
    positions, rope_ref = refs["rotary_cos_sin"]

    def rope_table(p):
        cos, sin = keras_posenc.rotary_cos_sin(p, 128, max_wavelength=500000.0)
        return torch.cat([cos[:, :64], sin[:, :64]], -1)

    rope_layer = keras_posenc.RotaryEmbedding(max_wavelength=500000.0)
    q = tensor(rng.normal(size=(2, 300, 4, 128)).astype("f4"))

    # The paper's sinusoid at a run-time start near 2**24.
    start = 16_777_215 - 300
    rates = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    sine_angles = (start + np.arange(300))[:, None] * rates
    sine_ref = np.stack([np.sin(sine_angles), np.cos(sine_angles)], -1).reshape(300, 64)

    def sine_table(s):
        return keras_posenc.sinusoidal_table(300, 64, start_index=s)

    sine_layer = keras_posenc.SinusoidalPositionEncoding()
    x = tensor(rng.normal(size=(2, 300, 64)).astype("f4"))

    timesteps, timestep_ref = refs["timestep_embedding"]
    timestep_layer = keras_posenc.TimestepEmbedding(256)

    (heads, queries, keys), alibi_ref = refs["alibi_bias"]
    alibi_layer = keras_posenc.AlibiBias()
    scores = tensor(np.zeros((1, heads, queries, keys), "f4"))

    return {
        "rotary_cos_sin_flux": (flux_table, (flux_ids,), flux),
        "rope_axes_layer": (
            lambda q, i: axes_layer(q, positions=i),
            (q_axes, flux_ids),
            None,
        ),
        "rotary_cos_sin": (rope_table, (tensor(positions),), rope_ref),
        "rope_layer": (
            lambda q, s: rope_layer(q, start_index=s),
            (q, tensor(2**20)),
            None,
        ),
        "sinusoidal_table": (sine_table, (tensor(start),), sine_ref),
        "sinusoidal_layer": (
            lambda x, s: sine_layer(x, start_index=s),
            (x, tensor(start)),
            None,
        ),
        "timestep_layer": (timestep_layer, (tensor(timesteps),), timestep_ref),
        "alibi_layer": (
            lambda s, k: alibi_layer(s, start_index=k),
            (scores, tensor(keys - queries)),
            alibi_ref[None],
        ),
    }


def compare(setting):
    """Each case's eager and compiled results, compared."""
    import numpy as np
    import torch

    if setting == "emulate_precision_casts":
        import torch._inductor.config

        torch._inductor.config.emulate_precision_casts = True
    rows = {}
    for name, (fn, inputs, reference) in cases().items():
        with torch.no_grad():
            eager = fn(*inputs)  # builds a layer first, as Keras does
            torch._dynamo.reset()
            compiled = torch.compile(fn)(*inputs)
        eager, compiled = (v.detach().cpu().numpy() for v in (eager, compiled))
        same = eager.view("u4") == compiled.view("u4")
        row = {
            "same_bits": float(same.mean()),
            "max_difference": float(np.abs(compiled - eager).max()),
        }
        if reference is not None:
            scale = np.maximum(np.abs(reference), 1.0)
            for key, value in (("eager", eager), ("compiled", compiled)):
                error = np.abs(value.astype("f8") - reference) / scale
                row[f"{key}_error"] = float(error.max())
        rows[name] = row
        print(name, json.dumps(row), flush=True)
    return rows


def main(argv=None):
    args = _select(sys.argv[1:] if argv is None else argv)
    import torch
    from keras.src.backend.torch.core import get_device

    result = {
        "setting": args.setting,
        "device": str(get_device()),
        "device_name": (
            torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        ),
        "torch": torch.__version__,
        "cases": compare(args.setting),
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
