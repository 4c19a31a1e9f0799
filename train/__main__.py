"""``python -m train [preset=NAME] [key=value ...]``: the command-line entry point (see :mod:`train.app`)."""

import sys

from train.app import main

sys.exit(main(sys.argv[1:]))
