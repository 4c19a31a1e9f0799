"""``python -m train.app.data IMAGES_IDX LABELS_IDX OUT.npz``: IDX files → ``dataset=npz:OUT.npz``."""

import sys

from train.app.data._idx import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
