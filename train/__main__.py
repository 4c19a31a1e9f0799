"""``python -m train [preset=NAME] [key=value ...]``: the command-line entry point (:mod:`train.app.cli`)."""

import sys

from train.app.cli import main

sys.exit(main(sys.argv[1:]))
