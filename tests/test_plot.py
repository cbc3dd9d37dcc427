"""Plot helpers and the `plot` command: real figures with the right data."""

import builtins
import os

import numpy as np
import pytest
from conftest import reference

pytest.importorskip("matplotlib")

from keras_posenc import cli, plot  # noqa: E402


def test_heatmap_shows_the_table():
    fig = plot.heatmap(40, 12, layout="concatenated")
    (image,) = fig.axes[0].get_images()
    np.testing.assert_allclose(image.get_array(), reference(np.arange(40), 12, layout="concatenated"), atol=2e-7)


def test_wavelengths_are_a_geometric_progression():
    fig = plot.wavelengths(32, max_wavelength=500.0)
    line = fig.axes[0].get_lines()[0]
    np.testing.assert_allclose(line.get_ydata(), 2 * np.pi * 500.0 ** (np.arange(16) * 2 / 32), rtol=1e-12)


def test_similarity_depends_on_distance():
    fig = plot.similarity(64, 16, origin=20)
    curve = fig.axes[0].get_lines()[0]
    k = curve.get_xdata()
    expected = np.cos(np.outer(k, 1e4 ** (-np.arange(0, 16, 2) / 16))).sum(axis=1)
    np.testing.assert_allclose(curve.get_ydata(), expected, atol=1e-5)
    with pytest.raises(ValueError, match=r"`origin`, expected a position < length \(64\). Received: origin=64"):
        plot.similarity(64, 16, origin=64)


def test_precision_curve_ours_flat_naive_growing():
    fig = plot.precision(depth=16, exponents=[8, 16, 24], window=32)
    naive, ours = (line.get_ydata() for line in fig.axes[0].get_lines()[:2])
    assert max(ours) <= 2e-7
    assert naive[-1] > 0.1 > naive[0]


def test_missing_matplotlib_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match=r"'plot' extra: pip install \"keras-posenc\[plot\]\""):
        plot.heatmap(8, 4)


@pytest.mark.parametrize("kind", ["heatmap", "wavelengths", "similarity"])
def test_plot_command_writes_a_png(tmp_path, kind, capsys):
    out = tmp_path / f"{kind}.png"
    assert cli.main(["plot", "--kind", kind, "--length", "32", "--depth", "16", "--out", str(out)]) == 0
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(out) > 2000
    assert cli.main(["plot", "--kind", kind, "--out", str(out)]) == 1  # never overwritten unasked
    assert "--overwrite" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == [f"{kind}.png"]
