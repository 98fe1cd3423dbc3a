"""``boo-build``, the command line: one module per subcommand (``app`` parses
and dispatches). The console script is ``boo_build.cli:main``."""

from .app import main

__all__ = ["main"]
