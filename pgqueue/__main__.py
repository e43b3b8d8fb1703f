"""Allow ``python -m pgqueue``."""

import sys

from .cli import main

sys.exit(main())
