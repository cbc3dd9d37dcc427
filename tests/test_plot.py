"""Plot helpers: the data they draw, composition into given Axes, save_png."""

import os
import sys

import numpy as np
import pytest
from _helpers import LAYOUTS, TOL, reference, to_numpy

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402

import keras_posenc  # noqa: E402
from keras_posenc import plot  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def omega(depth, base=10000.0):
    """The paper's frequencies, written here independently of the package."""
    return base ** (-2.0 * np.arange((depth + 1) // 2) / depth)


def image_of(fig, index=0):
    (image,) = fig.axes[index].get_images()
    return np.asarray(image.get_array())


# -- the data drawn --------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_heatmap_shows_the_table(layout):
    # The image is the table: the float64 reference within TOL, and exactly
    # what sinusoidal_table returns.
    fig = plot.heatmap(40, 12, layout=layout, max_wavelength=500.0)
    shown = image_of(fig)
    np.testing.assert_allclose(
        shown, reference(np.arange(40), 12, 500.0, layout), rtol=0, atol=TOL
    )
    table = keras_posenc.sinusoidal_table(40, 12, layout=layout, max_wavelength=500.0)
    np.testing.assert_array_equal(shown, to_numpy(table))


def test_wavelengths_are_a_geometric_progression():
    # Pair i repeats every 2 pi b**(2i/d) positions: ratio b**(2/d) throughout.
    fig = plot.wavelengths(32, max_wavelength=500.0)
    waves = fig.axes[0].get_lines()[0].get_ydata()
    np.testing.assert_allclose(waves, 2 * np.pi / omega(32, 500.0), rtol=1e-12)
    np.testing.assert_allclose(waves[1:] / waves[:-1], 500.0 ** (2 / 32), rtol=1e-12)


def test_similarity_curve_is_the_sum_of_cosines_of_distance():
    # PE(p) . PE(p + k) = sum_i cos(k w_i) for an even depth: a function of k alone.
    fig = plot.similarity(64, 16, origin=20)
    curve = fig.axes[0].get_lines()[0]
    k = curve.get_xdata()
    np.testing.assert_array_equal(k, np.arange(64) - 20)
    expected = np.cos(np.outer(k, omega(16))).sum(axis=1)
    np.testing.assert_allclose(curve.get_ydata(), expected, rtol=0, atol=1e-5)


def test_similarity_matrix_is_the_gram_matrix_of_the_table():
    # Entry (p, q) is PE(p) . PE(q), from the float64 reference within 1e-5.
    rows = reference(np.arange(24), 8)
    shown = image_of(plot.similarity_matrix(24, 8))
    np.testing.assert_allclose(shown, rows @ rows.T, rtol=0, atol=1e-5)


def test_precision_curve_ours_flat_naive_growing():
    # Ours stays within 2e-7 of float64 up to 2**24; the naive float32 angle
    # loses about p * 2**-24 and passes 0.1 there.
    fig = plot.precision(depth=16, exponents=[8, 16, 24], window=32)
    naive, ours = (line.get_ydata() for line in fig.axes[0].get_lines()[:2])
    np.testing.assert_array_equal(
        fig.axes[0].get_lines()[0].get_xdata(), [2**8, 2**16, 2**24]
    )
    assert max(ours) <= TOL
    assert naive[0] < 1e-5 < naive[1] < naive[2]
    assert naive[2] > 0.1


# -- composition -------------------------------------------------------------------


def test_ax_none_makes_a_new_figure():
    # Without `ax`: a new Figure holding the plot (and the colorbar).
    fig = plot.heatmap(8, 4)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2 and fig.axes[0].get_images()


def test_given_ax_is_drawn_into_with_the_same_data():
    # With `ax`: that Axes gets the same data, its figure is returned.
    fig = Figure()
    left, right = fig.subplots(1, 2)
    assert plot.heatmap(16, 6, ax=right) is fig
    assert plot.similarity(16, 6, origin=3, ax=left) is fig
    np.testing.assert_array_equal(
        np.asarray(right.get_images()[0].get_array()), image_of(plot.heatmap(16, 6))
    )
    alone = plot.similarity(16, 6, origin=3).axes[0].get_lines()[0].get_ydata()
    np.testing.assert_array_equal(left.get_lines()[0].get_ydata(), alone)


def test_subplots_composes_every_plot_into_one_figure():
    # One Figure, five Axes, each plot in its own (plus two colorbars).
    fig, axes = plot.subplots(5, width=20.0)
    plot.heatmap(16, 8, ax=axes[0])
    plot.wavelengths(8, ax=axes[1])
    plot.similarity(16, 8, ax=axes[2])
    plot.similarity_matrix(16, 8, ax=axes[3])
    plot.precision(8, exponents=[4, 8], window=8, ax=axes[4])
    assert len(fig.axes) == 7
    assert all(ax.get_images() or ax.get_lines() for ax in axes)


@pytest.mark.parametrize(
    "name, kwargs, labels, legend",
    [
        (
            "heatmap",
            {"length": 8, "depth": 4, "layout": "concatenated", "max_wavelength": 500},
            ("dimension", "position", "PE table (concatenated, depth 4, base 500)"),
            False,
        ),
        (
            "wavelengths",
            {"depth": 8, "max_wavelength": 500.0},
            (
                "pair index i (dimensions 2i, 2i+1)",
                "wavelength (positions)",
                "Wavelengths, depth 8, base 500",
            ),
            True,
        ),
        (
            "similarity",
            {"length": 8, "depth": 4, "origin": 3},
            ("distance k", "PE(3) . PE(3 + k)", "Dot product against distance"),
            False,
        ),
        (
            "similarity_matrix",
            {"length": 8, "depth": 4},
            ("position q", "position p", "PE(p) . PE(q)"),
            False,
        ),
        (
            "precision",
            {"depth": 4, "exponents": [4], "window": 4},
            (
                "position",
                "max |error| vs float64",
                "Precision at growing positions (depth 4)",
            ),
            True,
        ),
    ],
)
def test_each_plot_labels_its_axes_and_explains_its_reference_lines(
    name, kwargs, labels, legend
):
    # x label, y label and title say what is drawn; the two plots with
    # reference lines (2 pi, the 2e-7 bound) name them in a legend.
    ax = getattr(plot, name)(**kwargs).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == labels
    assert (ax.get_legend() is not None) is legend


# -- arguments and sizes --------------------------------------------------------


def test_similarity_length_zero_blames_length_not_origin():
    # The size is checked before the origin it would derive.
    with pytest.raises(
        ValueError, match=r"`length`, expected a positive integer. Received: length=0"
    ):
        plot.similarity(0, 16)


def test_similarity_origin_must_be_a_position():
    # origin in [0, length).
    with pytest.raises(
        ValueError,
        match=r"`origin`, expected a position < length \(64\). Received: origin=64",
    ):
        plot.similarity(64, 16, origin=64)


def test_similarity_matrix_refuses_a_huge_matrix_before_allocating():
    # 100000 positions would be a 74.5 GiB float64 matrix.
    with pytest.raises(
        ValueError,
        match=r"`length`, expected at most 4096 positions .* 80000000000 bytes "
        r"\(74.5 GiB\). Received: length=100000",
    ):
        plot.similarity_matrix(100000, 8)


def test_heatmap_refuses_more_than_2_to_24_cells():
    # length x depth beyond 2**24 is refused, naming the bytes.
    with pytest.raises(
        ValueError,
        match=r"`length`, expected at most 16777216 cells .* 134219776 bytes",
    ):
        plot.heatmap(65537, 256)


def test_check_size_names_flags_for_the_command_line():
    # flags=True names --length / --depth, as the CLI prints them.
    with pytest.raises(
        ValueError,
        match=r"`--depth`, expected a positive integer <= 65536. Received: --depth=0",
    ):
        plot.check_size("heatmap", 8, 0, flags=True)


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("heatmap", {"layout": "rows"}, r"`layout`, expected one of \("),
        (
            "wavelengths",
            {"max_wavelength": 0.0},
            r"`max_wavelength`, expected a finite",
        ),
        ("precision", {"exponents": [4, 32]}, r"`exponents`, expected .* in \[1, 31\]"),
        ("precision", {"window": 0}, r"`window`, expected a positive integer"),
        ("subplots", {"columns": 0}, r"`columns`, expected a positive integer"),
    ],
)
def test_bad_arguments_are_named(name, kwargs, message):
    # Every argument is checked with a Keras-style message.
    with pytest.raises(ValueError, match=message):
        getattr(plot, name)(**kwargs)


def test_missing_matplotlib_says_to_install_matplotlib_itself(monkeypatch):
    # Without matplotlib: an ImportError naming what works on every install
    # (the 'plot' extra would add TensorFlow to a JAX- or torch-only one).
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(
        ImportError,
        match=r"needs matplotlib, which is not installed: pip install "
        r"matplotlib$",
    ):
        plot.heatmap(8, 4)


# -- save_png --------------------------------------------------------------------


def test_save_png_writes_a_png_and_leaves_no_temporary_file(tmp_path):
    # A real PNG at `path`, the absolute path returned, nothing else left.
    path = plot.save_png(plot.wavelengths(8), tmp_path / "w.png")
    assert path == str(tmp_path / "w.png")
    assert (tmp_path / "w.png").read_bytes()[:8] == PNG_MAGIC
    assert os.listdir(tmp_path) == ["w.png"]


def test_save_png_refuses_to_replace_unless_asked(tmp_path):
    # An existing file is kept unless overwrite=True, which replaces it.
    path = tmp_path / "pe.png"
    path.write_bytes(b"old")
    with pytest.raises(FileExistsError, match=r"Refusing to replace .* overwrite=True"):
        plot.save_png(plot.wavelengths(8), path)
    assert path.read_bytes() == b"old"
    plot.save_png(plot.wavelengths(8), path, overwrite=True)
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert os.listdir(tmp_path) == ["pe.png"]


def test_save_png_never_replaces_a_directory(tmp_path):
    # overwrite=True replaces a regular file only.
    (tmp_path / "pe.png").mkdir()
    with pytest.raises(ValueError, match=r"it is not a regular file"):
        plot.save_png(plot.wavelengths(8), tmp_path / "pe.png", overwrite=True)
    assert (tmp_path / "pe.png").is_dir()


def test_failed_save_keeps_the_old_file_and_leaves_no_debris(tmp_path):
    # A write that fails midway: the old PNG stays, no temporary file remains.
    path = tmp_path / "pe.png"
    path.write_bytes(b"old")
    fig = plot.wavelengths(8)

    def failing(target, **kwargs):
        with open(target, "wb") as f:
            f.write(PNG_MAGIC)
        raise OSError(28, "No space left on device")

    fig.savefig = failing
    with pytest.raises(OSError, match="No space left on device"):
        plot.save_png(fig, path, overwrite=True)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["pe.png"]


def test_save_png_checks_its_arguments(tmp_path):
    # path and overwrite are checked before anything is written.
    with pytest.raises(ValueError, match=r"`path`, expected a non-empty str"):
        plot.save_png(plot.wavelengths(8), "")
    with pytest.raises(ValueError, match=r"`overwrite`, expected a bool"):
        plot.save_png(plot.wavelengths(8), tmp_path / "x.png", overwrite="yes")
    assert os.listdir(tmp_path) == []


# -- formats ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, start",
    [("w.png", PNG_MAGIC), ("w.svg", b"<?xml"), ("w.pdf", b"%PDF-")],
)
def test_save_writes_the_format_of_the_suffix(tmp_path, name, start):
    # The bytes match the suffix (an .svg file never holds a PNG).
    path = plot.save(plot.wavelengths(8), tmp_path / name)
    assert path == str(tmp_path / name)
    assert (tmp_path / name).read_bytes().startswith(start)
    assert os.listdir(tmp_path) == [name]


@pytest.mark.parametrize("name", ["w.jpg", "w", "w.png.txt"])
def test_save_refuses_a_suffix_it_cannot_write(tmp_path, name):
    # Anything but .png, .svg, .pdf: a ValueError naming `path`, no file.
    with pytest.raises(
        ValueError,
        match=r"`path`, expected a file name ending in \.png, \.svg, \.pdf\. "
        r"Received: path=",
    ):
        plot.save(plot.wavelengths(8), tmp_path / name)
    assert os.listdir(tmp_path) == []


def test_save_png_refuses_another_suffix(tmp_path):
    # save_png writes PNGs only: `pe.svg` is refused, not filled with PNG bytes.
    with pytest.raises(ValueError, match=r"`path`, expected a file name ending in"):
        plot.save_png(plot.wavelengths(8), tmp_path / "pe.svg")
    assert os.listdir(tmp_path) == []


def test_file_format_ignores_case():
    # The suffix decides, in any case.
    assert [plot.file_format(n) for n in ("a.PNG", "b.Svg", "c.pdf")] == [
        "png",
        "svg",
        "pdf",
    ]


@pytest.mark.parametrize("base", [5e-324, 0.5])
def test_precision_refuses_a_base_below_one(base):
    # Below 1 the float64 reference of the plot is not exact (5e-324 made
    # its frequencies overflow, with 18 numpy warnings): refused by name.
    with pytest.raises(
        ValueError,
        match=r"`max_wavelength`, expected a number >= 1 for a precision plot",
    ):
        plot.precision(8, max_wavelength=base, exponents=[4], window=4)


def test_importing_plot_does_not_import_keras():
    # The command line checks plot arguments before Keras starts.
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.argv = ['keras-posenc']; import keras_posenc.plot; "
            "print('keras' in sys.modules)",
        ],
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "False", done.stderr[-2000:]
