"""Rotary embeddings (Su et al., 2021): the configuration of every `rope_type`,
the scalings' frequencies, the rotation and the inputs of a call.
"""
