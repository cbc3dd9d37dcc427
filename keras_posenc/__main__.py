"""`python -m keras_posenc`: see `keras_posenc.cli`."""

import sys

from keras_posenc.cli import main

sys.exit(main())
