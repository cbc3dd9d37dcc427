"""Draws docs/alibi.png, the picture of docs/alibi.md.

Run: python docs/make_alibi_figure.py (needs the 'plot' extra). Left: the
causal ALiBi bias of 32 keys as each of 12 heads sees it from the last
query (the interleaved slopes of a head count that is not a power of
two); right: the bias of head 0 over queries and keys, the future masked.
"""

import os

import numpy as np
from keras import ops

import keras_posenc
from keras_posenc import plot

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "alibi.png")
HEADS, KEYS = 12, 32

if __name__ == "__main__":
    bias = ops.convert_to_numpy(keras_posenc.alibi_bias(HEADS, KEYS))[0]
    figure, (rows, square) = plot.subplots(2, width=11.0, height=3.8)
    slopes = keras_posenc.alibi_slopes(HEADS)
    for h in range(HEADS):
        rows.plot(np.arange(KEYS), bias[h, -1], label=f"head {h}: {slopes[h]:.3g}")
    rows.set_xlabel("key position (query at 31)")
    rows.set_ylabel("bias")
    rows.set_title(f"ALiBi, {HEADS} heads: slope x (key - query)")
    rows.legend(fontsize=6, ncol=2)
    masked = np.where(np.triu(np.ones((KEYS, KEYS), bool), 1), np.nan, bias[0])
    image = square.imshow(masked, cmap="viridis")
    square.set_xlabel("key")
    square.set_ylabel("query")
    square.set_title("head 0 (slope 1/2), future keys masked")
    figure.colorbar(image, ax=square)
    print(plot.save_png(figure, OUT, overwrite=True))
