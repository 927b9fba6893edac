"""``python -m sprat``: the command line (see :mod:`sprat.cli`)."""

import sys

from .cli import main

sys.exit(main())
