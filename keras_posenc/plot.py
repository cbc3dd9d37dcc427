"""Pictures of the encoding: heatmap, wavelengths, similarity, precision.

Needs matplotlib: `pip install "keras-posenc[plot]"`. Every function
returns a `matplotlib.figure.Figure` (nothing is shown or saved unless you
ask), built with the object API so it works headless and in notebooks.

The encoding is the one of Vaswani et al., "Attention Is All You Need"
(2017), section 3.5, https://arxiv.org/abs/1706.03762.
"""

import os

import numpy as np

from keras_posenc import _checks
from keras_posenc.tables import _constants, sinusoidal_table


def _figure(width=7.0, height=4.0):
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "keras_posenc.plot needs matplotlib, which is in the 'plot' extra: "
            'pip install "keras-posenc[plot]"'
        ) from error
    return Figure(figsize=(width, height), layout="constrained")


def heatmap(length=128, depth=64, *, layout="interleaved", max_wavelength=10000.0):
    """Heatmap of the table: positions down, dimensions across.

    Args:
        length: int. Number of positions. Defaults to `128`.
        depth: int. Number of dimensions. Defaults to `64`.
        layout: `"interleaved"` or `"concatenated"`. Defaults to
            `"interleaved"`.
        max_wavelength: float. The base of the wavelengths. Defaults to
            `10000.0`.

    Returns:
        A matplotlib `Figure`.

    Example:

    >>> fig = keras_posenc.plot.heatmap(64, 32)
    >>> fig.savefig("table.png")  # doctest: +SKIP
    """
    table = sinusoidal_table(
        length, depth, layout=layout, max_wavelength=max_wavelength
    ).numpy()
    fig = _figure()
    ax = fig.add_subplot()
    image = ax.imshow(
        table, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest"
    )
    ax.set(
        xlabel="dimension",
        ylabel="position",
        title=f"Sinusoidal position encoding ({layout}, depth {depth}, base {max_wavelength:g})",
    )
    fig.colorbar(image, ax=ax, label="value")
    return fig


def wavelengths(depth=64, *, max_wavelength=10000.0):
    """Wavelength (in positions) of each sine/cosine pair, log scale.

    They form a geometric progression from `2 pi` to nearly
    `2 pi * max_wavelength`: low dimensions turn fast (local), high ones
    slowly (global).

    Args:
        depth: int. Number of dimensions. Defaults to `64`.
        max_wavelength: float. The base of the wavelengths. Defaults to
            `10000.0`.

    Returns:
        A matplotlib `Figure`.

    Example:

    >>> fig = keras_posenc.plot.wavelengths(512)
    """
    depth = _checks.positive_int("depth", depth)
    max_wavelength = _checks.wavelength(max_wavelength)
    omega = _constants(depth, max_wavelength, "interleaved").omega
    fig = _figure()
    ax = fig.add_subplot()
    ax.semilogy(np.arange(len(omega)), 2 * np.pi / omega, marker=".", linestyle="-")
    ax.axhline(2 * np.pi, color="gray", linestyle=":", label="2 pi")
    ax.axhline(
        2 * np.pi * max_wavelength, color="gray", linestyle="--", label="2 pi * base"
    )
    ax.set(
        xlabel="pair index i (dimensions 2i, 2i+1)",
        ylabel="wavelength (positions)",
        title=f"Wavelengths, depth {depth}, base {max_wavelength:g}",
    )
    ax.legend()
    return fig


def similarity(length=128, depth=64, *, max_wavelength=10000.0, origin=None):
    """Dot products of encodings: against distance, and position by position.

    Left: `PE(p) . PE(p + k)` against `k` for a fixed `p`; it depends on
    `k` only (the encoding of `p + k` is a rotation of that of `p`). Right:
    the full `[length, length]` matrix of dot products.

    Args:
        length: int. Number of positions. Defaults to `128`.
        depth: int. Number of dimensions. Defaults to `64`.
        max_wavelength: float. The base of the wavelengths. Defaults to
            `10000.0`.
        origin: int. The position `p` of the left panel. Defaults to
            `length // 2`.

    Returns:
        A matplotlib `Figure`.

    Example:

    >>> fig = keras_posenc.plot.similarity(100, 32)
    """
    table = (
        sinusoidal_table(length, depth, max_wavelength=max_wavelength)
        .numpy()
        .astype(np.float64)
    )
    origin = (
        length // 2 if origin is None else _checks.non_negative_int("origin", origin)
    )
    if origin >= length:
        raise _checks.invalid("origin", f"a position < length ({length})", origin)
    dots = table @ table.T
    fig = _figure(11.0, 4.0)
    left, right = fig.subplots(1, 2)
    offsets = np.arange(length) - origin
    left.plot(offsets, dots[origin])
    left.set(
        xlabel="distance k",
        ylabel=f"PE({origin}) . PE({origin} + k)",
        title="Dot product against distance",
    )
    image = right.imshow(dots, cmap="viridis", interpolation="nearest")
    right.set(xlabel="position", ylabel="position", title="PE(p) . PE(q)")
    fig.colorbar(image, ax=right)
    return fig


def precision(
    depth=64, *, max_wavelength=10000.0, exponents=range(4, 25, 2), window=256
):
    """Max error against float64 at growing positions: ours vs naive float32.

    The naive formula forms the angle `p * w` in float32 and loses about
    `p * 2**-24`; ours reduces the phase exactly in int32.

    Args:
        depth: int. Number of dimensions. Defaults to `64`.
        max_wavelength: float. The base of the wavelengths. Defaults to
            `10000.0`.
        exponents: the windows end at positions `2**e`. Defaults to
            `4, 6, ..., 24`.
        window: int. Positions per window. Defaults to `256`.

    Returns:
        A matplotlib `Figure`.

    Example:

    >>> fig = keras_posenc.plot.precision()
    """
    depth = _checks.positive_int("depth", depth)
    omega = _constants(depth, _checks.wavelength(max_wavelength), "interleaved").omega
    columns = np.arange(depth) // 2
    is_sin = np.arange(depth) % 2 == 0
    ends, ours, naive = [], [], []
    for e in exponents:
        end = 2**e
        positions = np.arange(max(0, end - window), end)
        angle = positions[:, None] * omega[columns]
        exact = np.where(is_sin, np.sin(angle), np.cos(angle))
        angle32 = positions.astype(np.float32)[:, None] * omega[columns].astype(
            np.float32
        )
        naive32 = np.where(is_sin, np.sin(angle32), np.cos(angle32))
        table = sinusoidal_table(
            len(positions),
            depth,
            start_index=int(positions[0]),
            max_wavelength=max_wavelength,
        ).numpy()
        ends.append(end)
        ours.append(np.abs(table - exact).max())
        naive.append(np.abs(naive32 - exact).max())
    fig = _figure()
    ax = fig.add_subplot()
    ax.loglog(ends, naive, marker="o", label="naive float32 angle")
    ax.loglog(ends, ours, marker="s", label="keras_posenc")
    ax.axhline(2**-25, color="gray", linestyle=":", label="half a float32 ulp")
    ax.set(
        xlabel="position",
        ylabel="max |error| vs float64",
        title=f"Precision at growing positions (depth {depth})",
    )
    ax.legend()
    return fig


def save_png(figure, path):
    """Writes `figure` to `path` as a PNG, atomically (temporary file, then rename).

    Args:
        figure: a matplotlib `Figure`.
        path: the file to write.

    Example:

    >>> keras_posenc.plot.save_png(keras_posenc.plot.heatmap(), "pe.png")  # doctest: +SKIP
    """
    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    partial = os.path.join(folder, f".{os.path.basename(path)}.partial")
    try:
        figure.savefig(partial, format="png", dpi=110)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return path


__all__ = ["heatmap", "precision", "save_png", "similarity", "wavelengths"]
