"""SemVer 2.0.0 precedence (boo_build.bundle_names): what "the newest version" means to `boo-build lock`."""

from __future__ import annotations

import random

import pytest

from boo_build.bundle_names import compare_versions, is_prerelease, newest, precedence_key

# The spec's own chain (semver.org, section 11), then numeric fields compared as numbers.
ASCENDING = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
             "1.0.0-rc.1", "1.0.0", "1.0.1", "1.9.0", "1.10.0", "2.0.0-0", "2.0.0-1", "2.0.0-a", "2.0.0"]


def test_sorting_gives_the_spec_order():
    shuffled = ASCENDING[:]
    random.Random(3).shuffle(shuffled)
    assert sorted(shuffled, key=precedence_key) == ASCENDING
    for lo, hi in zip(ASCENDING, ASCENDING[1:]):
        assert compare_versions(lo, hi) == -1 and compare_versions(hi, lo) == 1, (lo, hi)


def test_build_metadata_does_not_count():
    assert compare_versions("1.0.0+a", "1.0.0+b") == 0
    assert compare_versions("1.0.0+build.9", "1.0.0") == 0
    assert compare_versions("1.0.0-rc.1+x", "1.0.0") == -1


def test_newest_skips_prereleases_unless_asked():
    assert newest(["0.1.0", "0.10.0", "0.9.0", "1.0.0-rc.1"]) == "0.10.0"
    assert newest(["0.1.0", "1.0.0-rc.1"], prereleases=True) == "1.0.0-rc.1"
    assert newest(["1.0.0-rc.1"]) is None
    assert newest([]) is None
    assert is_prerelease("1.0.0-rc.1") and not is_prerelease("1.0.0+rc.1")


@pytest.mark.parametrize("bad", ["1.0", "01.0.0", "1.0.0-", "v1.0.0", "1.0.0-01", None])
def test_not_semver_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="not semver"):
        precedence_key(bad)
