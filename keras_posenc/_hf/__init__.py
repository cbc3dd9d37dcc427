"""Hugging Face `config.json` files read as transformers reads them: the file
itself (read safely), the model types verified against transformers, and
the per-architecture reading.
"""
