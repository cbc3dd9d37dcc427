"""Floors shared by the benchmarks: plain Keras layers reading precomputed rows.

A plain layer is Keras's own call cost plus the least work a position
layer can do; eager, that call cost is the floor for any layer.
"""

import keras
from keras import ops


class PlainAdd(keras.layers.Layer):
    """Adds rows `start_index + [0, L)` of a precomputed table to `x` `[B, L, D]`."""

    def __init__(self, table, **kwargs):
        super().__init__(**kwargs)
        self.table = ops.convert_to_tensor(table)

    def call(self, x, start_index=0):
        return x + self.table[start_index : start_index + x.shape[1]]
