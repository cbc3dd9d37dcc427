"""A diffusion step's cost of `use_exact`: keras-hub Flux and SD3 MMDiT forwards.

    python -m benchmarks.diffusion_step [--backend tensorflow|jax|torch |
        --all-backends] [--reps 11] [--smoke] [--torch-compile]
        [--json PATH] [--record]

One denoising step is one forward of the diffusion transformer. Two
keras-hub models of a small but realistic width and depth, float32, batch
1, each built twice with the same weights: as keras-hub makes it, and
after `keras_posenc.compat.use_exact` (FLUX's RoPE and timestep
embedding, SD3's timestep sinusoid made exact):

* `FluxBackbone`: hidden 512 (4 heads of 128, axes (16, 56, 56)), one
  double-stream and two single-stream blocks, 1024 image tokens (a 32 x 32
  packed latent, 512 px) and 128 text tokens, guidance embedded;
* `MMDiT` (Stable Diffusion 3): hidden 512 (8 heads of 64), 3 blocks, a
  64 x 64 x 16 latent in 2 x 2 patches (1024 image tokens) and 128 context
  tokens.

Each is timed eager (TensorFlow, JAX op by op, torch) and compiled
(`tf.function`, `jax.jit`; `torch.compile` with `--torch-compile`), the
two builds interleaved in one run (medians of `--reps`). The table gives
the step in ms with keras-hub's layers and with the exact ones, their
ratio and the overhead per step in percent (the goal: at most 1%).

A whole step's difference is the sum of every op's noise on a shared
machine (a few percent between two builds of the same model), so the
position parts are also timed alone, interleaved, in the same mode: FLUX's
`EmbedND` over the step's ids and its two timestep sinusoids (timestep and
guidance), SD3's timestep embedding. Their difference over the keras-hub
step is the column "parts per step", the overhead `use_exact` adds.
"""

import sys
import warnings

from benchmarks import _common

if __name__ == "__main__":
    _common.select_backend(sys.argv[1:])

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_posenc import compat  # noqa: E402

# keras-hub's FLUX blocks build their sublayers on the first call.
warnings.filterwarnings("ignore", message="`build\\(\\)` was called on layer")
BACKEND = keras.backend.backend()
NAME = "diffusion_step"
GOAL = 0.01  # at most 1% of a step
HUB, EXACT = "keras_hub", "use_exact"
# name: model sizes (the defaults, then --smoke's).
SIZES = {
    "flux": (
        {"hidden": 512, "heads": 4, "double": 1, "single": 2, "side": 32, "text": 128},
        {"hidden": 64, "heads": 2, "double": 1, "single": 1, "side": 4, "text": 4},
    ),
    "sd3": (
        {"hidden": 512, "heads": 8, "layers": 3, "side": 64, "text": 128},
        {"hidden": 32, "heads": 2, "layers": 1, "side": 8, "text": 4},
    ),
}


def _flux(size, rng):
    """A `FluxBackbone` and its inputs (one step: image ids of the packed grid)."""
    import keras_hub

    hidden, heads, side = size["hidden"], size["heads"], size["side"]
    head = hidden // heads
    axes = [head // 8, head * 7 // 16, head * 7 // 16]  # FLUX's (16, 56, 56) at 128
    tokens, channels, text_dim = side * side, 64, hidden
    model = keras_hub.models.FluxBackbone(
        input_channels=channels,
        hidden_size=hidden,
        mlp_ratio=4.0,
        num_heads=heads,
        depth=size["double"],
        depth_single_blocks=size["single"],
        axes_dim=axes,
        theta=10000,
        use_bias=True,
        guidance_embed=True,
        image_shape=(tokens, channels),
        text_shape=(size["text"], text_dim),
        image_ids_shape=(tokens, 3),
        text_ids_shape=(size["text"], 3),
        y_shape=(hidden,),
    )
    ids = np.zeros((1, tokens, 3), "float32")
    ids[0, :, 1:] = np.indices((side, side)).reshape(2, -1).T
    inputs = {
        "image": rng.normal(size=(1, tokens, channels)).astype("float32"),
        "image_ids": ids,
        "text": rng.normal(size=(1, size["text"], text_dim)).astype("float32"),
        "text_ids": np.zeros((1, size["text"], 3), "float32"),
        "y": rng.normal(size=(1, hidden)).astype("float32"),
        "timesteps": np.array([0.7311], "float32"),
        "guidance": np.array([3.5], "float32"),
    }
    return model, inputs


def _sd3(size, rng):
    """An SD3 `MMDiT` and its inputs."""
    from keras_hub.src.models.stable_diffusion_3.mmdit import MMDiT

    hidden, side = size["hidden"], size["side"]
    model = MMDiT(
        patch_size=2,
        hidden_dim=hidden,
        num_layers=size["layers"],
        num_heads=size["heads"],
        position_size=side // 2,
        latent_shape=(side, side, 16),
        context_shape=(size["text"], hidden),
        pooled_projection_shape=(hidden,),
    )
    inputs = {
        "latent": rng.normal(size=(1, side, side, 16)).astype("float32"),
        "context": rng.normal(size=(1, size["text"], hidden)).astype("float32"),
        "pooled_projection": rng.normal(size=(1, hidden)).astype("float32"),
        "timestep": np.array([[731.1]], "float32"),
    }
    return model, inputs


BUILDERS = {"flux": _flux, "sd3": _sd3}


def models(name, smoke):
    """keras-hub's model, the same weights with `use_exact`, and the inputs."""
    size = SIZES[name][1 if smoke else 0]
    hub, inputs = BUILDERS[name](size, np.random.default_rng(0))
    exact, _ = BUILDERS[name](size, np.random.default_rng(0))
    exact.set_weights(hub.get_weights())
    swapped = compat.use_exact(exact)
    assert swapped > 0, swapped
    return hub, exact, inputs, size


def _eager(model):
    if BACKEND == "torch":
        import torch

        def call(x):
            with torch.no_grad():
                return model(x, training=False)

        return call
    return lambda x: model(x, training=False)


def _compiled(model, torch_compile):
    """The forward compiled as a user would: `tf.function`, `jax.jit` of the
    stateless call, `torch.compile` (or `None` where it is not asked)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(lambda x: model(x, training=False), autograph=False)
    if BACKEND == "jax":
        import jax

        state = (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
        )

        @jax.jit
        def step(trainable, non_trainable, x):
            return model.stateless_call(trainable, non_trainable, x, training=False)[0]

        return lambda x: step(*state, x)
    if not torch_compile:
        return None
    import torch

    compiled = torch.compile(model)

    def call(x):
        with torch.no_grad():
            return compiled(x, training=False)

    return call


def _modes(torch_compile):
    compiled = {"tensorflow": "tf.function", "jax": "jax.jit", "torch": "torch.compile"}
    modes = ["eager"]
    if BACKEND != "torch" or torch_compile:
        modes.append(compiled[BACKEND])
    return modes


def _runners(hub_call, exact_call, x):
    return {HUB: lambda: hub_call(x), EXACT: lambda: exact_call(x)}


def _position_parts(model, name):
    """The calls a step makes to the layers `use_exact` swaps, as a model:
    FLUX's `EmbedND` (RoPE of every axis) and its two timestep sinusoids,
    or SD3's timestep embedding (its MLP included, the same in both)."""
    if name == "sd3":
        return lambda x: model.timestep_embedding(x["timestep"])

    def flux(x):
        ids = keras.ops.concatenate((x["text_ids"], x["image_ids"]), axis=1)
        return (
            model.positional_embedder(ids),
            model.timestep_embedding(x["timesteps"], dim=256),
            model.timestep_embedding(x["guidance"], dim=256),
        )

    return flux


def _parts_runner(model, name, mode):
    """`_position_parts` called as the step is in `mode`."""
    parts = _position_parts(model, name)
    if mode == "eager":
        return _eager(_CallAs(parts))
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(parts, autograph=False)
    if BACKEND == "jax":
        import jax

        return jax.jit(parts)
    import torch

    compiled = torch.compile(parts)

    def call(x):
        with torch.no_grad():  # as the compiled step runs
            return compiled(x)

    return call


class _CallAs:
    """A function called as `_eager` calls a model (`training` dropped)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x, training=False):
        return self.fn(x)


def measure(name, reps, smoke, torch_compile):
    """`{mode: {keras_hub: summary, use_exact: summary, overhead}}` of one model."""
    hub, exact, inputs, size = models(name, smoke)
    x = {k: keras.ops.convert_to_tensor(v) for k, v in inputs.items()}
    out = {"size": size}
    for mode in _modes(torch_compile):
        make = _eager if mode == "eager" else (lambda m: _compiled(m, torch_compile))
        times = _common.interleaved_times(_runners(make(hub), make(exact), x), reps)
        hub_times = _common.time_summary(times[HUB])
        exact_times = _common.time_summary(times[EXACT], times[HUB])
        parts = _common.interleaved_times(
            _runners(
                _parts_runner(hub, name, mode), _parts_runner(exact, name, mode), x
            ),
            reps * 5,
        )
        hub_parts = _common.time_summary(parts[HUB])
        exact_parts = _common.time_summary(parts[EXACT], parts[HUB])
        parts_ms = exact_parts["median_ms"] - hub_parts["median_ms"]
        out[mode] = {
            HUB: hub_times,
            EXACT: exact_times,
            "overhead_ms": exact_times["median_ms"] - hub_times["median_ms"],
            "overhead": exact_times["ratio"] - 1.0,
            "parts": {HUB: hub_parts, EXACT: exact_parts},
            "parts_overhead_ms": parts_ms,
            "parts_overhead": parts_ms / hub_times["median_ms"],
        }
    return out


def _rows(backend, section):
    rows = []
    for name in SIZES:
        for mode, entry in section["models"][name].items():
            if mode == "size":
                continue
            rows.append(
                [
                    backend,
                    name,
                    mode,
                    f"{entry[HUB]['median_ms']:.2f}",
                    f"{entry[EXACT]['median_ms']:.2f}",
                    f"{entry[EXACT]['ratio']:.4f}x",
                    f"{entry['overhead']:+.2%}",
                    f"{entry['parts'][HUB]['median_ms']:.3f}",
                    f"{entry['parts'][EXACT]['median_ms']:.3f}",
                    f"{entry['parts_overhead']:+.3%}",
                ]
            )
    return rows


HEADER = [
    "backend",
    "model",
    "mode",
    "keras-hub ms",
    "use_exact ms",
    "ratio",
    "per step",
    "parts keras-hub ms",
    "parts use_exact ms",
    "parts per step",
]


def run(reps, smoke, torch_compile):
    section = {
        "run": _common.run_info(BACKEND),
        "reps": reps,
        "goal": GOAL,
        "models": {name: measure(name, reps, smoke, torch_compile) for name in SIZES},
    }
    print(_common.machine_line(section["run"]))
    print(f"\n### One forward (a denoising step), batch 1, medians of {reps}\n")
    print(_common.markdown_table(HEADER, _rows(BACKEND, section)))
    return section


def merged_markdown(sections):
    rows = [row for backend, s in sections.items() for row in _rows(backend, s)]
    return _common.markdown_table(HEADER, rows)


def main(argv=None):
    torch_compile = (
        ("--torch-compile",),
        {
            "action": "store_true",
            "help": "also time torch.compile on torch (minutes of compiling)",
        },
    )
    return _common.script_main(
        argv,
        sys.modules[__name__],
        11,
        "tiny models (hidden 32, 64), 3 reps",
        lambda a: run(3 if a.smoke else a.reps, a.smoke, a.torch_compile),
        merged_markdown,
        options=[torch_compile],
    )


if __name__ == "__main__":
    main()
