"""diffusers transformer configs (a pipeline's `transformer/config.json`) read
as diffusers builds their position code: the file (`config_file`), the
models and their conventions as data (`models`), the arguments of each
layer (`layers`).
"""
