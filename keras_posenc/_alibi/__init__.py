"""ALiBi's exact parts: the slopes on the host (`slopes`), the bias in the
graph (`bias`); `keras_posenc.alibi` is their public face."""
