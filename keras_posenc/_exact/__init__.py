"""The exact sin/cos engine (Vaswani et al., 2017, section 3.5) and its row sources:
host constants, the engine written once with `keras.ops`, computed rows and
lookup tables, and the float64 formula plots and benchmarks use.
"""
