"""Generate golden RoPE values from Hugging Face transformers.

Run from the repository root::

    python tests/golden/rope/make_golden.py

transformers and torch are NOT project dependencies; they are only needed to
(re)generate the files in this directory.  The tests that use the golden values
only need numpy and ``cases.json``.

For every case this writes, next to this script:

* ``{name}.inv_freq.npy``   HF's float32 inv_freq, as its rope init function
  returns it on CPU.
* ``{name}.inv_freq64.npy`` the same formula evaluated independently in float64
  numpy, transcribed from ``transformers/modeling_rope_utils.py``.  The script
  asserts that ``float32(inv_freq64)`` is within ``MAX_ULPS`` of HF's value for
  every channel.
* ``{name}.positions.npy``  int64 positions.
* ``{name}.cos.npy`` / ``{name}.sin.npy``  HF's float32 cos/sin at those
  positions, shape ``[len(positions), dim]``, HF "half" layout
  (``emb = cat(freqs, freqs)``), already multiplied by ``attention_factor``.
* ``{name}.q.npy``          fixed random float32 query ``[1, seq, 2, head_dim]``
  (layout ``[batch, seq, heads, head_dim]``, ``numpy.random.default_rng(0)``).
* ``{name}.q_rotated.npy``  HF's ``apply_rotary_pos_emb`` applied to ``q``, same
  layout as ``q`` (for partial rotary the pass-through channels are appended,
  as the model does).

and ``cases.json`` describing every case.
"""

from __future__ import annotations

import copy
import json
import math
import pathlib
import sys

import numpy as np

OUT_DIR = pathlib.Path(__file__).resolve().parent
POSITIONS = np.array(
    [0, 1, 2, 3, 7, 63, 64, 65, 100, 511, 1000, 2047, 4095], dtype=np.int64
)
NUM_HEADS = 2
Q_SEED = 0
MAX_ULPS = 2
# Per-case exceptions to MAX_ULPS.  llama3's medium-frequency ("smoothed")
# channels: HF computes wavelen = 2*pi/inv_freq, the smooth factor and the blend
# in float32 starting from a float32 pow result that is itself ~0.8 ulp off; the
# blend is roughly quadratic in inv_freq, which about doubles that relative
# error, so HF's float32 is up to ~3.5 ulp from the exact value (checked with
# mpmath) while the float64 formula is accurate.  The transcription is checked
# at MAX_ULPS separately by applying the float64 llama3 smoothing to HF's own
# float32 unscaled inv_freq (see run_case).
ULPS_ALLOWED = {"llama3": 4}
MP_DIGITS = 50

SHORT_FACTOR = [1.0 + 0.05 * i for i in range(32)]
LONG_FACTOR = [1.0 + 0.5 * i for i in range(32)]


def _llama(head_dim, max_pos=4096, theta=10000.0, rope_scaling=None):
    cfg = {
        "head_dim": head_dim,
        "hidden_size": head_dim * NUM_HEADS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_HEADS,
        "num_hidden_layers": 1,
        "max_position_embeddings": max_pos,
        "rope_theta": theta,
    }
    if rope_scaling is not None:
        cfg["rope_scaling"] = rope_scaling
    return cfg


def _phi3(head_dim, max_pos=4096, theta=10000.0, rope_scaling=None, **extra):
    # Phi3 derives the rotary size from hidden_size // num_attention_heads:
    # Llama's config without its head_dim.
    cfg = _llama(head_dim, max_pos, theta, rope_scaling)
    del cfg["head_dim"]
    cfg.update(extra)
    return cfg


YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
}


def _longrope(name, seq_len):
    """Phi-3's LongRoPE case at `seq_len` (up to 4096: the short factors)."""
    config = _phi3(
        64,
        max_pos=131072,
        rope_scaling=copy.deepcopy(LONGROPE),
        original_max_position_embeddings=4096,
    )
    return {"name": name, "model": "phi3", "seq_len": seq_len, "config": config}


LONGROPE = {
    "rope_type": "longrope",
    "short_factor": SHORT_FACTOR,
    "long_factor": LONG_FACTOR,
    "original_max_position_embeddings": 4096,
}

# model: which HF model family provides the config class, the rotary embedding
# class and apply_rotary_pos_emb.  seq_len: passed to the rope init function
# (None: the function is called without it, as at model init).
CASES = [
    {"name": "default", "model": "llama", "config": _llama(64)},
    {
        "name": "default_theta500k",
        "model": "llama",
        "config": _llama(128, theta=500000.0),
    },
    {
        "name": "linear",
        "model": "llama",
        "config": _llama(64, rope_scaling={"rope_type": "linear", "factor": 4.0}),
    },
    {
        "name": "dynamic",
        "model": "llama",
        "seq_len": 8192,
        "config": _llama(
            64, max_pos=2048, rope_scaling={"rope_type": "dynamic", "factor": 2.0}
        ),
    },
    {
        "name": "yarn",
        "model": "llama",
        "config": _llama(64, max_pos=16384, rope_scaling=dict(YARN)),
    },
    {
        "name": "yarn_mscale",
        "model": "llama",
        "config": _llama(
            64,
            max_pos=16384,
            rope_scaling=dict(YARN, mscale=1.0, mscale_all_dim=0.707),
        ),
    },
    {
        "name": "llama3",
        "model": "llama",
        "config": _llama(
            128,
            max_pos=131072,
            theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        ),
    },
    _longrope("longrope_short", 4096),
    _longrope("longrope_long", 8192),
    {
        "name": "partial",
        "model": "phi3",
        "config": _phi3(64, partial_rotary_factor=0.5),
    },
]


# ---------------------------------------------------------------------------
# Independent transcription of transformers' formulas.  ``M`` is a backend:
# numpy float64 or mpmath.  Each function returns (inv_freq list, attention
# factor).  Everything is computed in the backend's precision from the config's
# (float64) values.
# ---------------------------------------------------------------------------


class F64:
    name = "numpy.float64"

    @staticmethod
    def num(x):
        return np.float64(x)

    log = staticmethod(np.log)
    sqrt = staticmethod(np.sqrt)
    pi = np.float64(np.pi)


class MP:
    name = f"mpmath ({MP_DIGITS} digits)"

    def __init__(self):
        import mpmath

        mpmath.mp.dps = MP_DIGITS
        self.mpmath = mpmath
        self.log = mpmath.log
        self.sqrt = mpmath.sqrt
        self.pi = mpmath.pi

    def num(self, x):
        return self.mpmath.mpf(x)


def rope_dims(case):
    cfg = case["config"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    dim = int(head_dim * cfg.get("partial_rotary_factor", 1.0))
    return head_dim, dim


def reference_inv_freq(case, M):
    cfg = case["config"]
    rs = cfg.get("rope_scaling") or {"rope_type": "default"}
    rope_type = rs["rope_type"]
    _, dim = rope_dims(case)
    base = M.num(cfg["rope_theta"])
    n = dim // 2
    # exponent 2i/dim, exact in both backends for the dims used here
    expo = [M.num(2 * i) / M.num(dim) for i in range(n)]
    attention_factor = M.num(1.0)

    if rope_type == "default":
        inv = [1 / base**e for e in expo]
    elif rope_type == "linear":
        factor = M.num(rs["factor"])
        inv = [1 / base**e / factor for e in expo]
    elif rope_type == "dynamic":
        factor = M.num(rs["factor"])
        max_pos = M.num(cfg["max_position_embeddings"])
        seq_len = case.get("seq_len")
        seq_len = M.num(max(seq_len or 0, cfg["max_position_embeddings"]))
        new_base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (
            M.num(dim) / M.num(dim - 2)
        )
        inv = [1 / new_base**e for e in expo]
    elif rope_type == "yarn":
        factor = M.num(rs["factor"])
        orig = M.num(rs["original_max_position_embeddings"])
        mscale = rs.get("mscale")
        mscale_all_dim = rs.get("mscale_all_dim")

        def get_mscale(scale, m=1):
            if scale <= 1:
                return M.num(1.0)
            return M.num(0.1) * M.num(m) * M.log(scale) + 1

        if rs.get("attention_factor") is not None:
            attention_factor = M.num(rs["attention_factor"])
        elif mscale and mscale_all_dim:
            attention_factor = get_mscale(factor, mscale) / get_mscale(
                factor, mscale_all_dim
            )
        else:
            attention_factor = get_mscale(factor)
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def correction_dim(num_rot):
            return (
                M.num(dim)
                * M.log(orig / (M.num(num_rot) * 2 * M.pi))
                / (2 * M.log(base))
            )

        low = correction_dim(beta_fast)
        high = correction_dim(beta_slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        low, high = M.num(low), M.num(high)
        if low == high:
            high = high + M.num(0.001)
        inv = []
        for i, e in enumerate(expo):
            pos = base**e
            extrap = 1 / pos
            interp = 1 / (factor * pos)
            ramp = min(max((M.num(i) - low) / (high - low), M.num(0)), M.num(1))
            # HF: interp * (1 - extrap_factor) + extrap * extrap_factor with
            # extrap_factor = 1 - ramp
            inv.append(interp * ramp + extrap * (1 - ramp))
        case["_yarn_low_high"] = (float(low), float(high))
    elif rope_type == "llama3":
        inv = llama3_scale([1 / base**e for e in expo], rs, M)
    elif rope_type == "longrope":
        orig = rs["original_max_position_embeddings"]
        factor = rs.get("factor")
        if factor is None:
            factor = M.num(cfg["max_position_embeddings"]) / M.num(orig)
        factor = M.num(factor)
        if rs.get("attention_factor") is not None:
            attention_factor = M.num(rs["attention_factor"])
        elif factor <= 1:
            attention_factor = M.num(1.0)
        else:
            attention_factor = M.sqrt(1 + M.log(factor) / M.log(M.num(orig)))
        seq_len = case.get("seq_len")
        ext = rs["long_factor"] if seq_len and seq_len > orig else rs["short_factor"]
        inv = [1 / (M.num(x) * base**e) for x, e in zip(ext, expo, strict=True)]
    else:
        raise ValueError(rope_type)
    return inv, attention_factor


def llama3_scale(inv_freq, rs, M):
    """llama3 rescaling of the unscaled inverse frequencies ``inv_freq``."""
    factor = M.num(rs["factor"])
    lff = M.num(rs["low_freq_factor"])
    hff = M.num(rs["high_freq_factor"])
    old = M.num(rs["original_max_position_embeddings"])
    low_wl = old / lff
    high_wl = old / hff
    out = []
    for f in inv_freq:
        wl = 2 * M.pi / f
        if wl < high_wl:
            out.append(f)
        elif wl > low_wl:
            out.append(f / factor)
        else:
            s = (old / wl - lff) / (hff - lff)
            out.append((1 - s) * f / factor + s * f)
    return out


def correctly_rounded_f32(x, mpmath):
    """Nearest float32 to the mpmath number ``x`` (ties to even)."""
    f = np.float32(float(x))
    cands = [
        np.nextafter(f, np.float32(-np.inf)),
        f,
        np.nextafter(f, np.float32(np.inf)),
    ]
    errs = [abs(mpmath.mpf(float(c)) - x) for c in cands]
    best = min(errs)
    winners = [c for c, e in zip(cands, errs, strict=True) if e == best]
    if len(winners) > 1:  # exact tie: pick even mantissa
        winners = [c for c in winners if int(c.view(np.int32)) % 2 == 0]
    return winners[0]


def ulp_diff(a, b):
    a = np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    b = np.asarray(b, np.float32).view(np.int32).astype(np.int64)
    return np.abs(a - b)


# ---------------------------------------------------------------------------
# transformers side
# ---------------------------------------------------------------------------


def hf_classes(model):
    if model == "llama":
        from transformers import LlamaConfig as Config
        from transformers.models.llama import modeling_llama as mod

        return Config, mod.LlamaRotaryEmbedding, mod.apply_rotary_pos_emb, mod
    if model == "phi3":
        from transformers import Phi3Config as Config
        from transformers.models.phi3 import modeling_phi3 as mod

        return Config, mod.Phi3RotaryEmbedding, mod.apply_rotary_pos_emb, mod
    raise ValueError(model)


def run_case(case, torch, mp_backend):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    name = case["name"]
    Config, Rotary, apply_rope, mod = hf_classes(case["model"])
    config = Config(**copy.deepcopy(case["config"]))
    rope_parameters = copy.deepcopy(config.rope_parameters)
    rope_type = rope_parameters["rope_type"]
    head_dim, dim = rope_dims(case)
    seq_len = case.get("seq_len")

    # 1. inv_freq exactly as HF's init function returns it on CPU.
    cpu = torch.device("cpu")
    if rope_type == "default":
        init_name = f"{Rotary.__name__}.compute_default_rope_parameters"
        inv_t, attn = Rotary.compute_default_rope_parameters(config, device=cpu)
    else:
        fn = ROPE_INIT_FUNCTIONS[rope_type]
        init_name = f"transformers.modeling_rope_utils.{fn.__name__}"
        kwargs = {} if seq_len is None else {"seq_len": seq_len}
        inv_t, attn = fn(config, cpu, **kwargs)
    inv_freq = inv_t.detach().cpu().numpy()
    assert inv_freq.dtype == np.float32 and inv_freq.shape == (dim // 2,), (
        name,
        inv_freq.dtype,
        inv_freq.shape,
    )
    attn = float(attn)

    # 2. Independent float64 (and mpmath) evaluation of the same formula.
    inv64, attn64 = reference_inv_freq(case, F64)
    inv64 = np.array(inv64, dtype=np.float64)
    ulps = ulp_diff(inv64.astype(np.float32), inv_freq)
    assert ulps.max() <= ULPS_ALLOWED.get(name, MAX_ULPS), (name, ulps)
    if rope_type == "llama3":
        # Transcription check at MAX_ULPS: float64 smoothing of HF's float32
        # unscaled inv_freq (same expression as the start of HF's function).
        unscaled, _ = Rotary.compute_default_rope_parameters(config)
        rs = case["config"]["rope_scaling"]
        cond = llama3_scale([F64.num(v) for v in unscaled.numpy()], rs, F64)
        cond_ulps = ulp_diff(np.array(cond, np.float64).astype(np.float32), inv_freq)
        assert cond_ulps.max() <= MAX_ULPS, (name, cond_ulps)
    assert math.isclose(float(attn64), attn, rel_tol=1e-15), (name, attn64, attn)
    stats = {
        "n": dim // 2,
        "ne_np32": int(np.sum(inv64.astype(np.float32) != inv_freq)),
    }
    if mp_backend is not None:
        inv_mp, attn_mp = reference_inv_freq(case, mp_backend)
        cr = np.array(
            [correctly_rounded_f32(x, mp_backend.mpmath) for x in inv_mp],
            dtype=np.float32,
        )
        stats["ne_cr"] = int(np.sum(cr != inv_freq))
        stats["np32_ne_cr"] = int(np.sum(cr != inv64.astype(np.float32)))
        stats["max_ulps_vs_cr"] = int(ulp_diff(cr, inv_freq).max())
        rel = max(abs((a - b) / b) for a, b in zip(inv64, inv_mp, strict=True))
        assert rel < 1e-13, (name, rel)
        assert abs(attn_mp - attn) < 1e-14, (name, attn_mp, attn)
    stats["max_ulps_vs_np32"] = int(ulps.max())

    # 3. cos/sin from the model's own rotary embedding class.
    rope = Rotary(config)
    x = torch.zeros(1, len(POSITIONS), head_dim, dtype=torch.float32)
    position_ids = torch.from_numpy(POSITIONS)[None, :]
    forward = "forward"
    if rope_type == "dynamic":
        # Fix the NTK base for the serving length seq_len: install HF's inv_freq
        # for seq_len and mark it as cached, so the dynamic update (which only
        # grows beyond max_seq_len_cached, or resets below the original length)
        # leaves it alone for these positions.
        rope.inv_freq = inv_t.clone()
        rope.max_seq_len_cached = seq_len
        forward = (
            "forward (inv_freq buffer preset for seq_len, max_seq_len_cached=seq_len)"
        )
    if (
        rope_type == "longrope"
        and seq_len > rope_parameters["original_max_position_embeddings"]
    ):
        # The decorated forward would pick the short factors because
        # max(positions) + 1 <= original_max_position_embeddings; call the
        # undecorated forward with the long inv_freq installed instead.
        rope.inv_freq = inv_t.clone()
        raw = type(rope).forward.__wrapped__.__wrapped__
        with torch.no_grad():
            cos_t, sin_t = raw(rope, x, position_ids)
        forward = "forward.__wrapped__.__wrapped__ (undecorated) with inv_freq=long"
    else:
        cos_t, sin_t = rope(x, position_ids)
    assert torch.equal(rope.inv_freq, inv_t), name
    assert rope.attention_scaling == attn, (name, rope.attention_scaling, attn)
    cos = cos_t[0].numpy()
    sin = sin_t[0].numpy()
    assert cos.shape == (len(POSITIONS), dim) and cos.dtype == np.float32

    # 4. q and HF's apply_rotary_pos_emb ([batch, heads, seq, dim] inside HF).
    rng = np.random.default_rng(Q_SEED)
    q = rng.standard_normal((1, len(POSITIONS), NUM_HEADS, head_dim)).astype(np.float32)
    q_t = torch.from_numpy(q).transpose(1, 2)
    q_rot_t, _ = apply_rope(q_t, q_t, cos_t, sin_t, unsqueeze_dim=1)
    q_rot = q_rot_t.transpose(1, 2).contiguous().numpy()
    assert q_rot.shape == q.shape and q_rot.dtype == np.float32
    np.testing.assert_array_equal(q_rot[..., dim:], q[..., dim:])

    # float32 product error of HF: compare with float64 angles of HF's inv_freq.
    ang = POSITIONS[:, None].astype(np.float64) * inv_freq.astype(np.float64)[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    err_cos = float(np.max(np.abs(cos - np.cos(ang) * attn)))
    err_sin = float(np.max(np.abs(sin - np.sin(ang) * attn)))

    files = {
        "inv_freq": inv_freq,
        "inv_freq64": inv64,
        "positions": POSITIONS,
        "cos": cos,
        "sin": sin,
        "q": q,
        "q_rotated": q_rot,
    }
    for key, arr in files.items():
        path = OUT_DIR / f"{name}.{key}.npy"
        np.save(path, arr)
        assert path.stat().st_size < 100_000, path

    hf_config = {
        k: v for k, v in case["config"].items() if k not in ("num_hidden_layers",)
    }
    entry = {
        "name": name,
        "rope_type": rope_type,
        "hf_config": hf_config,
        "rope_parameters": rope_parameters,
        "hf_config_class": Config.__name__,
        "rotary_embedding_class": f"{mod.__name__}.{Rotary.__name__}",
        "rotary_forward": forward,
        "apply_rotary_pos_emb": f"{mod.__name__}.apply_rotary_pos_emb",
        "inv_freq_init_function": init_name,
        "head_dim": head_dim,
        "dim": dim,
        "partial_rotary_factor": rope_parameters.get("partial_rotary_factor", 1.0),
        "attention_factor": attn,
        "seq_len": seq_len,
        "num_heads": NUM_HEADS,
        "q_seed": Q_SEED,
        "positions": POSITIONS.tolist(),
        "max_abs_err_vs_float64_at_4095": err_cos,
        "max_abs_err_sin_vs_float64": err_sin,
        "inv_freq64_max_ulps_vs_hf": int(ulps.max()),
        "transformers_version": None,
        "torch_version": torch.__version__,
    }
    if rope_type == "yarn":
        entry["yarn_low_high"] = list(case["_yarn_low_high"])
    return entry, stats


def main():
    import torch
    import transformers

    torch.set_grad_enabled(False)
    try:
        mp_backend = MP()
    except ImportError:
        mp_backend = None
        print("mpmath not installed: correctly-rounded comparison skipped")

    entries = []
    all_stats = {}
    for case in CASES:
        entry, stats = run_case(case, torch, mp_backend)
        entry["transformers_version"] = transformers.__version__
        entries.append(entry)
        all_stats[case["name"]] = stats

    (OUT_DIR / "cases.json").write_text(json.dumps(entries, indent=1) + "\n")

    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print("inv_freq channels where HF float32 differs from:")
    print(f"  (a) numpy float32(float64 formula)  (b) correctly rounded via {MP.name}")
    tot = {"n": 0, "ne_np32": 0, "ne_cr": 0, "np32_ne_cr": 0}
    for name, s in all_stats.items():
        line = f"  {name:18s} n={s['n']:3d}  (a) {s['ne_np32']:3d}"
        line += f" (max {s['max_ulps_vs_np32']} ulp)"
        if "ne_cr" in s:
            line += f"  (b) {s['ne_cr']:3d} (max {s['max_ulps_vs_cr']} ulp)"
            line += f"  [float32(float64) != correctly rounded: {s['np32_ne_cr']}]"
        print(line)
        for k in tot:
            tot[k] += s.get(k, 0)
    print(
        f"  total: (a) {tot['ne_np32']}/{tot['n']} = {tot['ne_np32'] / tot['n']:.3f}"
        + (
            f"  (b) {tot['ne_cr']}/{tot['n']} = {tot['ne_cr'] / tot['n']:.3f}"
            f"  [float32(float64) != cr: {tot['np32_ne_cr']}]"
            if mp_backend is not None
            else ""
        )
    )
    for e in entries:
        print(
            f"  {e['name']:18s} attention_factor={e['attention_factor']!r:22s}"
            f" max|cos err|={e['max_abs_err_vs_float64_at_4095']:.3g}"
            f" max|sin err|={e['max_abs_err_sin_vs_float64']:.3g}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
