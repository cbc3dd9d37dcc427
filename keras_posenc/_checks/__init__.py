"""What callers give, checked and parsed once at the boundary: plain
arguments, positions, the options of the sinusoidal family, and the
values echoed in messages.
"""
