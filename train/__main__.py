"""``python -m train [preset=NAME] [key=value ...]``: the command-line entry point (:mod:`train.app.cli`).

Without the ``train`` extra installed it stops with one line naming the extra, exit status 2."""

import sys

from train import MissingExtra

try:
    from train.app.cli import main
except MissingExtra as missing:
    print(f"error: {missing}", file=sys.stderr)
    sys.exit(2)

sys.exit(main(sys.argv[1:]))
