"""Draws docs/positional_encoding.png, the README picture: python docs/make_figure.py"""
from matplotlib.figure import Figure
import numpy as np, keras_posenc
from keras_posenc import plot
fig = Figure(figsize=(13, 3.6), layout="constrained")
a, b, c = fig.subplots(1, 3)
t = keras_posenc.sinusoidal_table(128, 64).numpy()
im = a.imshow(t, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
a.set(xlabel="dimension", ylabel="position", title="PE table (128 positions, depth 64)")
fig.colorbar(im, ax=a)
omega = 1e4 ** (-np.arange(0, 64, 2) / 64)
b.semilogy(2 * np.pi / omega, marker="."); b.set(xlabel="pair i", ylabel="wavelength (positions)", title="Wavelengths: 2π … 2π·10⁴")
ends = [2**e for e in range(6, 25, 2)]; ours, naive = [], []
for e in ends:
    p = np.arange(e - 64, e); ang = p[:, None] * omega
    exact = np.sin(ang); ours.append(np.abs(keras_posenc.sinusoidal_table(64, 64, start_index=int(p[0])).numpy()[:, 0::2] - exact).max())
    naive.append(np.abs(np.sin(p.astype(np.float32)[:, None] * omega.astype(np.float32)) - exact).max())
c.loglog(ends, naive, marker="o", label="naive float32 angle"); c.loglog(ends, ours, marker="s", label="keras_posenc")
c.set(xlabel="position", ylabel="max |error| vs float64", title="Precision at long positions"); c.legend()
plot.save_png(fig, __file__.replace("make_figure.py", "positional_encoding.png"))
