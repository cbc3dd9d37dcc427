"""What the package keeps between eager calls: one budget, least recently used first.

Eager decoding asks every layer, at every step, for the rows of one new
position, and a prompt asks every layer of a model for the same span
(vllm and transformers keep a cos/sin cache per position for the same
reason). The exact engine of Vaswani et al. (2017, section 3.5,
https://arxiv.org/abs/1706.03762) and of RoPE keeps such rows, so that a
step reads a slice instead of running the engine, and keeps the engine of
each recent configuration (its host constants, device tensors and
compiled functions; RoPE's frequencies), so that the next layer or
function call of that configuration does not build it again. The
engines of the sinusoidal and RoPE layers are kept from a configuration's
second request: the first one's engine lives as long as the layers (or
the function call) holding it, and is handed to every layer of the
configuration while one holds it, so a configuration used once keeps
nothing after its layer is gone. Everything it keeps lives in one store,
which is:

* **bounded**: one budget in bytes for everything kept together, rows and
  engines (64 MiB, or `KERAS_POSENC_CACHE_BYTES` when the process starts;
  `set_cache_budget` changes it), the least recently used evicted first;
  rows or an engine larger than the budget are computed and not kept (an
  engine counts its constants once per copy it holds, as measured; see
  `cache_info`);
* **owned**: each entry of rows belongs to an encoder (the rows of one
  configuration, shared by every layer that has it) and goes with it, so
  the rows of layers that are gone are released; a layer holds its own
  engine, so evicting one never breaks a layer (nor makes a second one
  while it lives); `clear_cache` releases everything, engines included;
* **invisible**: a result never shares memory with kept rows, nothing is
  kept from inside a trace (`jax.jit`, `tf.function`, `torch.compile`),
  and rows are made outside torch's inference mode, so the order of calls
  never changes a result.

Nothing else is kept between calls but what is small by construction: a
hash of each of the last 1,024 first requests of a configuration (one
fixed 8 KiB array: which configurations to keep at their next request); the
RoPE step tables that living layers share (held weakly: at most one per
configuration and input layout of a living layer); what a layer holds
(its engine, its input layouts per shape, at most 256) goes with it; the
checked options of the last 64 timestep configurations (plain values, a
few hundred bytes each); on JAX, the row splitters of the last 8 block
sizes (one small compiled function each); and on torch, the device of
each Keras device name used (`cpu`, `cuda`: a `torch.device` each) and
there the constants every engine shares (eight tensors of at most 6 KiB,
`_exact.engine`). The
engines of the timestep, grid and N-axis RoPE families, and a grid
layer's kept axis rows, are in the one budget like the others.
"""

from keras_posenc._checks import arguments as _arguments
from keras_posenc._exact.engine import clear_shared
from keras_posenc._exact.kept import (
    BUDGET_VARIABLE,
    DEFAULT_BUDGET,
    STORE,
    CacheInfo,
)


def cache_info() -> CacheInfo:
    """What the package keeps now: entries, bytes, budget, hits, engines.

    The exact sinusoidal encoding (Vaswani et al., 2017,
    https://arxiv.org/abs/1706.03762) and RoPE keep the rows of recent
    eager calls (decoding steps, a prompt that every layer asks for) and
    the engines of recent configurations in one store with one budget; see
    `set_cache_budget` and `clear_cache`.

    Returns:
        A `CacheInfo`.

    Example:

    >>> keras_posenc.clear_cache()
    >>> pe = keras_posenc.SinusoidalPositionEncoding()
    >>> _ = pe(np.zeros((1, 100, 16), "float32"))
    >>> info = keras_posenc.cache_info()
    >>> info.entries, info.nbytes <= info.budget
    (1, True)
    """
    return STORE.info()


def clear_cache() -> None:
    """Releases everything the package keeps between eager calls.

    The exact encodings (Vaswani et al., 2017,
    https://arxiv.org/abs/1706.03762; RoPE) compute their rows again at the
    next calls (the same bits) and keep them within the budget; the next
    new layer or function call of a configuration builds its engine again
    (layers keep theirs, and hand them to new layers of their
    configuration while they live), and keeps it only from the request
    after (which configurations were asked for is forgotten too). Hits and
    misses start again from zero.

    Example:

    >>> keras_posenc.clear_cache()
    >>> keras_posenc.cache_info().nbytes
    0
    """
    STORE.clear()
    clear_shared()


def set_cache_budget(nbytes: int) -> int:
    """Sets the most bytes kept between eager calls; returns the old one.

    The rows of the exact encodings (Vaswani et al., 2017,
    https://arxiv.org/abs/1706.03762; RoPE) kept for decoding steps and
    prompts, and the engines of recent configurations. The budget covers
    everything kept, for every layer and configuration together; the least
    recently used entries are evicted first. `0` keeps nothing: every eager
    call computes its rows (decoding steps cost an engine run each), and
    every new layer and function call (`sinusoidal_table`,
    `rotary_cos_sin`) builds its engine (host constants, a compilation),
    unless a living layer of its configuration holds one. Whatever the
    budget, the engine of a sinusoidal or RoPE configuration is kept from
    its second request on (the first lives with its layer), and on torch
    the rows of a layer's first two decoding steps (or short prompts) are
    computed, not kept.
    The default is 64 MiB, or `KERAS_POSENC_CACHE_BYTES` when the process
    starts.

    Args:
        nbytes: int. A non-negative number of bytes.

    Returns:
        The previous budget, in bytes.

    Example:

    >>> old = keras_posenc.set_cache_budget(2**20)
    >>> keras_posenc.cache_info().budget
    1048576
    >>> _ = keras_posenc.set_cache_budget(old)
    """
    nbytes = _arguments.check_non_negative_int("nbytes", nbytes)
    return STORE.set_budget(nbytes)


__all__ = [
    "BUDGET_VARIABLE",
    "DEFAULT_BUDGET",
    "CacheInfo",
    "cache_info",
    "clear_cache",
    "set_cache_budget",
]
