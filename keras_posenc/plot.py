"""Pictures of the encoding: heatmap, wavelengths, similarity, precision.

The encoding is the one of Vaswani et al., "Attention Is All You Need"
(2017), section 3.5, https://arxiv.org/abs/1706.03762.

Needs matplotlib: `pip install matplotlib` (or the 'plot' extra, which
also installs TensorFlow). Every function draws into the matplotlib `Axes`
given as `ax`, or into a new `Figure` when `ax` is `None`, and returns the
figure drawn on; nothing is shown or saved unless you ask (`save_png`).
The figures use matplotlib's object API, so they work headless and in
notebooks, and several compose into one figure:

>>> from matplotlib.figure import Figure
>>> from keras_posenc import plot
>>> fig = Figure(figsize=(10, 3))
>>> left, right = fig.subplots(1, 2)
>>> _ = plot.heatmap(64, 32, ax=left)
>>> _ = plot.wavelengths(32, ax=right)
>>> plot.save_png(fig, "pe.png")  # doctest: +SKIP

Sizes are checked before anything is allocated (`check_size`): a plot is
a picture, not a way to run out of memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from keras_posenc._checks import arguments as _arguments
from keras_posenc._checks import options as _options
from keras_posenc._files import atomic as _files

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, FigureBase

KINDS = ("heatmap", "wavelengths", "similarity", "similarity_matrix", "precision")
# A [length, depth] table of 2**24 cells is 128 MiB in float64: 65536
# positions at depth 256, or 4096 at depth 4096.
MAX_CELLS = 2**24
# A [length, length] float64 matrix of 4096**2 cells is 128 MiB.
MAX_MATRIX_LENGTH = 4096
# The precision windows end at positions 2**e; positions are int32.
MAX_EXPONENT = 31
# The formats `save` writes, named by the file's suffix.
FORMATS = ("png", "svg", "pdf")


def _gib(n: int) -> str:
    return f"{n} bytes ({n / 2**30:.3g} GiB)"


def check_size(
    kind: str,
    length: int | None,
    depth: int,
    *,
    window: int | None = None,
    flags: bool = False,
) -> tuple[Any, int]:
    """Checks the sizes of a plot before anything is allocated.

    Args:
        kind: str. One of `KINDS`.
        length: int or None. Positions (heatmap, similarity, matrix).
        depth: int. Dimensions.
        window: int or None. Positions per window (precision).
        flags: bool. Name the arguments as command-line flags (`--length`)
            instead of Python arguments (`length`). Defaults to `False`.

    Returns:
        `(length, depth)`, checked.

    Raises:
        ValueError: naming the argument, the limit and the bytes it needs.

    The plots show the encoding of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762.

    Example (needs only `keras_posenc`):

    >>> from keras_posenc import plot
    >>> plot.check_size("heatmap", 128, 64)
    (128, 64)
    >>> try:
    ...     plot.check_size("similarity_matrix", 100000, 64)
    ... except ValueError as error:
    ...     print(str(error).split("would need ")[1])
    80000000000 bytes (74.5 GiB). Received: length=100000
    """
    kind = _arguments.check_choice("kind", kind, KINDS)
    name = {"length": "length", "depth": "depth", "window": "window"}
    if flags:
        name = {k: f"--{k}" for k in name}
    depth = _arguments.check_depth(depth, name["depth"])
    if kind == "wavelengths":
        return length, depth
    if kind == "precision":
        rows, rows_name = (
            _arguments.check_positive_int(name["window"], window),
            name["window"],
        )
    else:
        length = rows = _arguments.check_positive_int(name["length"], length)
        rows_name = name["length"]
    if kind == "similarity_matrix" and rows > MAX_MATRIX_LENGTH:
        raise _arguments.invalid(
            rows_name,
            f"at most {MAX_MATRIX_LENGTH} positions for a similarity matrix: its "
            f"[{rows}, {rows}] float64 matrix would need {_gib(rows * rows * 8)}",
            rows,
        )
    if rows * depth > MAX_CELLS:
        raise _arguments.invalid(
            rows_name,
            f"at most {MAX_CELLS} cells ({rows_name} x {name['depth']}) for a "
            f"{kind} plot: {rows} x {depth} float64 cells would need "
            f"{_gib(rows * depth * 8)}",
            rows,
        )
    return length, depth


def subplots(
    columns: int = 1, *, width: float = 7.0, height: float = 4.0
) -> tuple[Figure, list[Axes]]:
    """A new `Figure` with a row of `columns` Axes, for the functions here.

    Pictures of the encoding of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762, composed side by side.

    Args:
        columns: int. Number of Axes, side by side. Defaults to `1`.
        width: float. Figure width in inches. Defaults to `7.0`.
        height: float. Figure height in inches. Defaults to `4.0`.

    Returns:
        `(figure, axes)`: the matplotlib `Figure` and a list of its Axes.

    Raises:
        ImportError: if matplotlib is not installed.

    Example (needs only `keras_posenc` and matplotlib):

    >>> from keras_posenc import plot
    >>> fig, (left, right) = plot.subplots(2, width=10.0)
    >>> _ = plot.similarity(64, 16, ax=left)
    >>> _ = plot.similarity_matrix(64, 16, ax=right)
    >>> len(fig.axes)  # two panels and the matrix's colorbar
    3
    """
    columns = _arguments.check_positive_int("columns", columns)
    Figure = check_matplotlib()
    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, list(figure.subplots(1, columns, squeeze=False)[0])


def check_matplotlib() -> type[Figure]:
    """matplotlib's `Figure` class, or an `ImportError` that says what to install.

    The command line asks first, before Keras or TensorFlow is imported, so
    that a missing matplotlib is one line at once. The message names
    matplotlib itself, which works on every install: the 'plot' extra
    would also install TensorFlow on a JAX- or torch-only install. The
    plots show the encoding of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762.

    Returns:
        The `matplotlib.figure.Figure` class.

    Raises:
        ImportError: if matplotlib is not installed.

    Example (needs only `keras_posenc` and matplotlib):

    >>> from keras_posenc import plot
    >>> plot.check_matplotlib().__name__
    'Figure'
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            "keras_posenc.plot needs matplotlib, which is not installed: "
            "pip install matplotlib"
        ) from error
    return Figure


def _axes(ax: Axes | None, width: float = 7.0, height: float = 4.0) -> Axes:
    """`ax` itself, or the one Axes of a new Figure."""
    if ax is not None:
        return ax
    _, (ax,) = subplots(1, width=width, height=height)
    return ax


def _finish(
    ax: Axes, xlabel: str, ylabel: str, title: str, *, legend: bool = False
) -> FigureBase:
    """Labels `ax`, adds its legend if asked, and returns the figure it is on."""
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if legend:
        ax.legend()
    return ax.figure


def _table64(length: int, depth: int, **options: Any) -> np.ndarray:
    """`sinusoidal_table(length, depth, **options)` as a float64 array."""
    # Keras is imported on first draw, not with this module, so that the
    # command line checks its arguments without waiting for it.
    from keras import ops

    from keras_posenc.tables import sinusoidal_table

    table = sinusoidal_table(length, depth, **options)
    return ops.convert_to_numpy(table).astype(np.float64)


def heatmap(
    length: int = 128,
    depth: int = 64,
    *,
    layout: str = "interleaved",
    max_wavelength: float = 10000.0,
    ax: Axes | None = None,
) -> FigureBase:
    """Heatmap of the table: positions down, dimensions across.

    Shows `keras_posenc.sinusoidal_table(length, depth)`, the encoding of
    Vaswani et al. (2017), section 3.5, https://arxiv.org/abs/1706.03762.

    Args:
        length: int. Number of positions, with `length * depth <= 2**24`.
            Defaults to `128`.
        depth: int. Number of dimensions. Defaults to `64`.
        layout: `"interleaved"` or `"concatenated"`. Defaults to
            `"interleaved"`.
        max_wavelength: float. The base of the wavelengths. Defaults to
            `10000.0`.
        ax: matplotlib `Axes` to draw into, or `None` for a new `Figure`.
            Defaults to `None`.

    Returns:
        The matplotlib figure drawn on: a new `Figure`, or the one (or the
        `SubFigure`) holding `ax` when given.

    Example (needs only `keras_posenc` and matplotlib):

    >>> from keras_posenc import plot
    >>> fig = plot.heatmap(64, 32)
    >>> fig.axes[0].get_images()[0].get_array().shape
    (64, 32)
    """
    length, depth = check_size("heatmap", length, depth)
    layout = _arguments.check_choice("layout", layout, _options.LAYOUTS)
    max_wavelength = _arguments.check_wavelength(max_wavelength)
    table = _table64(length, depth, max_wavelength=max_wavelength, layout=layout)
    ax = _axes(ax)
    image = ax.imshow(
        table, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest"
    )
    ax.figure.colorbar(image, ax=ax, label="value")
    return _finish(
        ax,
        "dimension",
        "position",
        f"PE table ({layout}, depth {depth}, base {max_wavelength:g})",
    )


def wavelengths(
    depth: int = 64, *, max_wavelength: float = 10000.0, ax: Axes | None = None
) -> FigureBase:
    """Wavelength (in positions) of each sine/cosine pair, log scale.

    They form a geometric progression from `2 pi` to nearly
    `2 pi * max_wavelength` (Vaswani et al., 2017, section 3.5,
    https://arxiv.org/abs/1706.03762): low dimensions turn fast (local),
    high ones slowly (global).

    Args:
        depth: int. Number of dimensions. Defaults to `64`.
        max_wavelength, ax: as in `heatmap`.

    Returns:
        The figure drawn on, as in `heatmap`.

    Example (needs only `keras_posenc` and matplotlib):

    >>> from keras_posenc import plot
    >>> fig = plot.wavelengths(8)
    >>> fig.axes[0].get_lines()[0].get_ydata().round(2).tolist()
    [6.28, 62.83, 628.32, 6283.19]
    """
    from keras_posenc.tables import frequencies

    _, depth = check_size("wavelengths", None, depth)
    max_wavelength = _arguments.check_wavelength(max_wavelength)
    waves = 2 * np.pi / frequencies(depth, max_wavelength)
    ax = _axes(ax)
    ax.semilogy(np.arange(len(waves)), waves, marker=".", linestyle="-")
    ax.axhline(2 * np.pi, color="gray", linestyle=":", label="2 pi")
    ax.axhline(
        2 * np.pi * max_wavelength, color="gray", linestyle="--", label="2 pi * base"
    )
    return _finish(
        ax,
        "pair index i (dimensions 2i, 2i+1)",
        "wavelength (positions)",
        f"Wavelengths, depth {depth}, base {max_wavelength:g}",
        legend=True,
    )


def similarity(
    length: int = 128,
    depth: int = 64,
    *,
    max_wavelength: float = 10000.0,
    origin: int | None = None,
    ax: Axes | None = None,
) -> FigureBase:
    """Dot product `PE(p) . PE(p + k)` against the distance `k`, for one `p`.

    For an even depth it equals `sum_i cos(k w_i)`: it depends on `k` only,
    since the encoding of `p + k` is a rotation of that of `p` (Vaswani et
    al., 2017, section 3.5, https://arxiv.org/abs/1706.03762).

    Args:
        length: int. Positions `0 .. length - 1` are compared with `origin`,
            with `length * depth <= 2**24`. Defaults to `128`.
        depth: int. Number of dimensions. Defaults to `64`.
        max_wavelength: as in `heatmap`.
        origin: int. The position `p`, in `[0, length)`. Defaults to
            `length // 2`.
        ax: as in `heatmap`.

    Returns:
        The figure drawn on, as in `heatmap`.

    Example (needs only `keras_posenc` and matplotlib):

    >>> from keras_posenc import plot
    >>> fig = plot.similarity(9, 4, origin=4)
    >>> round(float(fig.axes[0].get_lines()[0].get_ydata()[4]), 6)  # depth / 2
    2.0
    """
    length, depth = check_size("similarity", length, depth)
    max_wavelength = _arguments.check_wavelength(max_wavelength)
    origin = (
        length // 2
        if origin is None
        else _arguments.check_non_negative_int("origin", origin)
    )
    if origin >= length:
        raise _arguments.invalid("origin", f"a position < length ({length})", origin)
    table = _table64(length, depth, max_wavelength=max_wavelength)
    ax = _axes(ax)
    ax.plot(np.arange(length) - origin, table @ table[origin])
    return _finish(
        ax,
        "distance k",
        f"PE({origin}) . PE({origin} + k)",
        "Dot product against distance",
    )


def similarity_matrix(
    length: int = 128,
    depth: int = 64,
    *,
    max_wavelength: float = 10000.0,
    ax: Axes | None = None,
) -> FigureBase:
    """The `[length, length]` matrix of dot products `PE(p) . PE(q)`.

    Constant along diagonals: it depends on `q - p` only (Vaswani et al.,
    2017, section 3.5, https://arxiv.org/abs/1706.03762).

    Args:
        length: int. Number of positions, at most `4096`. Defaults to `128`.
        depth: int. Number of dimensions. Defaults to `64`.
        max_wavelength, ax: as in `heatmap`.

    Returns:
        The figure drawn on, as in `heatmap`.

    Example (needs only `keras_posenc` and matplotlib):

    >>> from keras_posenc import plot
    >>> fig = plot.similarity_matrix(16, 8)
    >>> fig.axes[0].get_images()[0].get_array().shape
    (16, 16)
    """
    length, depth = check_size("similarity_matrix", length, depth)
    max_wavelength = _arguments.check_wavelength(max_wavelength)
    table = _table64(length, depth, max_wavelength=max_wavelength)
    ax = _axes(ax, 5.0, 4.0)
    image = ax.imshow(table @ table.T, cmap="viridis", interpolation="nearest")
    ax.figure.colorbar(image, ax=ax)
    return _finish(ax, "position q", "position p", "PE(p) . PE(q)")


def check_precision_base(max_wavelength: float, name: str = "max_wavelength") -> float:
    """Checks the base of a precision plot: a finite number >= 1.

    Below 1 the frequencies exceed one radian per position (and overflow
    float64 near 1e-308), so the float64 reference of the plot is no
    longer exact; the encoding itself still is.

    Args:
        max_wavelength: float. The base of the wavelengths.
        name: str. The argument name for messages. Defaults to
            `"max_wavelength"`.

    Returns:
        `max_wavelength` as a float.

    Raises:
        ValueError: naming `name`, for a base that is not a finite number
            >= 1.

    The plots show the encoding of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762.

    Example (needs only `keras_posenc`):

    >>> from keras_posenc import plot
    >>> plot.check_precision_base(500)
    500.0
    """
    max_wavelength = _arguments.check_wavelength(max_wavelength, name)
    if max_wavelength < 1:
        raise _arguments.invalid(
            name,
            "a number >= 1 for a precision plot (below 1 the frequencies exceed "
            "one radian per position and its float64 reference is not exact)",
            max_wavelength,
        )
    return max_wavelength


def _exponents(values: Iterable[int]) -> list[int]:
    values = list(values)
    if not values or any(
        not _arguments.is_int(e) or not 1 <= e <= MAX_EXPONENT for e in values
    ):
        raise _arguments.invalid(
            "exponents",
            f"a non-empty sequence of integers in [1, {MAX_EXPONENT}]",
            values,
        )
    return values


def precision(
    depth: int = 64,
    *,
    max_wavelength: float = 10000.0,
    exponents: Iterable[int] = range(4, 25, 2),
    window: int = 256,
    ax: Axes | None = None,
) -> FigureBase:
    """Max error against float64 at growing positions: ours vs naive float32.

    The naive formula forms the angle `p * w` in float32 and loses about
    `p * 2**-24` radians; ours reduces the phase exactly and stays within
    2e-7 (Vaswani et al., 2017, section 3.5, https://arxiv.org/abs/1706.03762
    for the formula). The float64 baseline is itself exact to about 1e-9
    only up to positions near 2**24.

    Args:
        depth: int. Number of dimensions. Defaults to `64`.
        max_wavelength: as in `heatmap`.
        exponents: integers in `[1, 31]`: the windows end at positions
            `2**e`. Defaults to `4, 6, ..., 24`.
        window: int. Positions per window, with `window * depth <= 2**24`.
            Defaults to `256`.
        ax: as in `heatmap`.

    Returns:
        The figure drawn on, as in `heatmap`.
        Its first line is the naive error, its second ours.

    Example (needs only `keras_posenc` and matplotlib):

    >>> from keras_posenc import plot
    >>> fig = plot.precision(depth=8, exponents=[8, 24], window=16)
    >>> naive, ours = (line.get_ydata() for line in fig.axes[0].get_lines()[:2])
    >>> bool(ours.max() < 2e-7 and naive[-1] > 0.05)
    True
    """
    from keras_posenc._exact import reference as _reference

    _, depth = check_size("precision", None, depth, window=window)
    max_wavelength = check_precision_base(max_wavelength)
    exponents = _exponents(exponents)
    ends, ours, naive = [], [], []
    for e in exponents:
        end = 2**e
        positions = np.arange(max(0, end - window), end)
        exact = _reference.sinusoidal_float64(positions, depth, max_wavelength)
        table = _table64(
            len(positions),
            depth,
            max_wavelength=max_wavelength,
            start_index=int(positions[0]),
        )
        usual = _reference.naive_float32(positions, depth, max_wavelength)
        ends.append(end)
        ours.append(np.abs(table - exact).max())
        naive.append(np.abs(usual - exact).max())
    ax = _axes(ax)
    ax.loglog(ends, naive, marker="o", label="naive float32 angle")
    ax.loglog(ends, ours, marker="s", label="keras_posenc")
    ax.axhline(2e-7, color="gray", linestyle=":", label="2e-7 bound")
    return _finish(
        ax,
        "position",
        "max |error| vs float64",
        f"Precision at growing positions (depth {depth})",
        legend=True,
    )


def file_format(path: str | os.PathLike[str], name: str = "path") -> str:
    """The format `save` writes for `path`: its suffix, one of `FORMATS`.

    Pictures of the encoding of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762, go to files whose suffix says what
    they hold: a `.svg` file never holds PNG bytes.

    Args:
        path: str or os.PathLike. The file to write.
        name: str. The argument name for messages. Defaults to `"path"`.

    Returns:
        `"png"`, `"svg"` or `"pdf"`.

    Raises:
        ValueError: naming `name`, if the suffix is none of those.

    Example (needs only `keras_posenc`):

    >>> from keras_posenc import plot
    >>> plot.file_format("figures/pe.SVG")
    'svg'
    """
    suffix = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if suffix not in FORMATS:
        raise _arguments.invalid(
            name, "a file name ending in " + ", ".join(f".{f}" for f in FORMATS), path
        )
    return suffix


def save(
    figure: Figure,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    dpi: int = 110,
) -> str:
    """Writes `figure` to `path` as PNG, SVG or PDF (its suffix), atomically.

    The file is written to a temporary sibling and renamed to `path`
    (`keras_posenc._files.atomic.atomic_file`), so a failure or a kill midway
    leaves no partial file and an existing `path` untouched. For pictures
    of the encoding of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762.

    Args:
        figure: a matplotlib `Figure`.
        path: str or os.PathLike. The file to write, ending in `.png`,
            `.svg` or `.pdf`; its folder is created.
        overwrite: bool. Replace an existing regular file at `path`.
            Defaults to `False`.
        dpi: int. Resolution of a PNG. Defaults to `110`.

    Returns:
        The absolute path written.

    Raises:
        FileExistsError: if `path` exists and `overwrite` is false.
        ValueError: if the suffix of `path` is not one of `FORMATS`, or
            `path` may not be replaced (not a regular file).

    Example (writes a file, so not run here):

    >>> from keras_posenc import plot
    >>> plot.save(plot.heatmap(), "pe.svg")  # doctest: +SKIP
    '/.../pe.svg'
    """
    written: str = _files.check_path(path)
    fmt = file_format(written)
    _arguments.check_bool("overwrite", overwrite)
    dpi = _arguments.check_positive_int("dpi", dpi)
    with _files.atomic_file(written, overwrite=overwrite) as staging:
        figure.savefig(staging, format=fmt, dpi=dpi)
    return written


def save_png(figure: Figure, path: str | os.PathLike[str], **options: Any) -> str:
    """Writes `figure` to `path`, which must end in `.png`; see `save`.

    For pictures of the encoding of Vaswani et al. (2017), section 3.5,
    https://arxiv.org/abs/1706.03762.

    Args:
        figure: a matplotlib `Figure`.
        path: str or os.PathLike. The file to write, ending in `.png`.
        **options: `overwrite` and `dpi`, as in `save`.

    Returns:
        The absolute path written.

    Raises:
        FileExistsError, ValueError: as in `save`; `ValueError` also if
            `path` does not end in `.png`.

    Example (writes a file, so not run here):

    >>> from keras_posenc import plot
    >>> plot.save_png(plot.heatmap(), "pe.png")  # doctest: +SKIP
    '/.../pe.png'
    """
    path = _files.check_path(path)
    if file_format(path) != "png":
        raise _arguments.invalid("path", "a file name ending in .png", path)
    return save(figure, path, **options)


__all__ = [
    "FORMATS",
    "check_precision_base",
    "check_size",
    "file_format",
    "heatmap",
    "precision",
    "save",
    "save_png",
    "similarity",
    "similarity_matrix",
    "subplots",
    "wavelengths",
]
