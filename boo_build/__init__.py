"""boo-build: ahead-of-time IREE norm kernels, packed into bundles.

Importing the package imports nothing heavy: the loader
(``boo_build.loader``) must stay importable without torch or the compiler.
"""

__version__ = "0.1.0"
