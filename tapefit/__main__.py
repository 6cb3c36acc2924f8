"""``python -m tapefit train ...``."""

import sys

from tapefit.cli import main

sys.exit(main(sys.argv[2:] if sys.argv[1:2] == ["train"] else sys.argv[1:]))
