"""Fixtures shared by the loader's test files (a file may define its own
``built`` or ``bundle`` for another purpose; pytest takes the nearer one)."""

import pytest

from boo_build.loader import open_bundle
from test_bundle import build_kernels


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The session's compiled kernels and their bundle (tests/test_bundle.py)."""
    return build_kernels(tmp_path_factory)


@pytest.fixture(scope="module")
def bundle(built):
    return open_bundle(built.path, device="local-task")
