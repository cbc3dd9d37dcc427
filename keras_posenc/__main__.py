"""`python -m keras_posenc`: see `keras_posenc.cli`.

Ctrl-C while the command line itself is being imported still ends in one
line and status 130 (after that, `cli.main` handles it).
"""

import sys

try:
    from keras_posenc import cli
except KeyboardInterrupt:
    print("keras-posenc: interrupted", file=sys.stderr)
    sys.exit(130)

try:
    status = cli.main()
except KeyboardInterrupt:  # between two statements of main's own handlers
    status = cli.report_interrupt()
sys.exit(status)
