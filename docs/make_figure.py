"""Draws docs/positional_encoding.png, the README picture.

Run: python docs/make_figure.py (needs the 'plot' extra). Three panels of
keras_posenc.plot on one figure: the table, its wavelengths, and the
precision of keras_posenc against the naive float32 angle.
"""

import os

from keras_posenc import plot

OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "positional_encoding.png"
)

if __name__ == "__main__":
    figure, (table, waves, precision) = plot.subplots(3, width=15.0, height=3.8)
    plot.heatmap(128, 64, ax=table)
    plot.wavelengths(64, ax=waves)
    plot.precision(64, exponents=range(6, 25, 2), window=64, ax=precision)
    print(plot.save_png(figure, OUT, overwrite=True))
