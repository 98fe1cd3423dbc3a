"""``python -m boo_build.cli``: the ``boo-build`` command."""

import sys

from .app import main

sys.exit(main())
