"""The command line's parser (no Keras import) and its process handling
(quiet imports, Ctrl-C); the commands themselves are `keras_posenc.cli`.
"""
