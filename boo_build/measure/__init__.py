"""``boo-build measure``: validate, time and select a bundle's kernels on this
machine's devices (``runner``) and what it reports (``results``). Needs the
loader's dependencies and torch, never the compiler, iree-turbine or doit."""
