"""``python -m msprobe.core`` runs the ``msprobe`` command."""

import sys

from msprobe.core.cli import main

sys.exit(main())
