"""Fixtures shared by the loader's test files (a file may define its own
``built`` or ``bundle`` for another purpose; pytest takes the nearer one)."""

import pytest

# helpers.py holds asserts too: rewrite them as in the test files
pytest.register_assert_rewrite("helpers")

from helpers import build_group_norms, build_kernels  # noqa: E402

from boo_build.loader import open_bundle  # noqa: E402


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The session's compiled kernels and their bundle (helpers.build_kernels)."""
    return build_kernels(tmp_path_factory)


@pytest.fixture(scope="session")
def gn_built(tmp_path_factory):
    """The session's group-norm build (helpers.GN_MANIFEST): its output folder."""
    return build_group_norms(tmp_path_factory)


@pytest.fixture(scope="module")
def bundle(built):
    return open_bundle(built.path, device="local-task")
