"""The bundle name and version rules, written once: the manifest checks them
when it is read, pack again when it writes a bundle (whose file name is
``<name>-<version>.tar.zst``).

Pure Python (``re`` only), like ``signature``: anything may import it.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

# Semantic Versioning 2.0.0 (https://semver.org, the spec's own regex with
# [0-9] for \d so no other script's digits pass): MAJOR.MINOR.PATCH, no leading
# zeros, optional -prerelease (dot-separated; numeric parts without leading
# zeros) and +build metadata. '+' is safe in a file name, and nothing splits
# a bundle's file name back into name and version.
SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
# A bundle or target name: safe in a file name on any file system, no '/'.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

VERSION_RULE = ("expected MAJOR.MINOR.PATCH (no leading zeros) with an optional -prerelease and "
                "+build metadata, e.g. 0.1.0, 1.2.0-rc.1 or 1.2.0+build.5")
NAME_RULE = "use letters, digits, '.', '_' and '-', starting with a letter or digit"


def is_version(version: Any) -> bool:
    return isinstance(version, str) and SEMVER.fullmatch(version) is not None


def is_name(name: Any) -> bool:
    return isinstance(name, str) and NAME.fullmatch(name) is not None


def version_problem(version: Any) -> str | None:
    """None for a semantic version, else the message saying why not."""
    return None if is_version(version) else f"version {version!r} is not semver: {VERSION_RULE}"


def name_problem(name: Any, what: str = "bundle name") -> str | None:
    """None for a valid bundle (or target) name, else the message saying why not."""
    return None if is_name(name) else f"{what} {name!r} is invalid: {NAME_RULE}"


# ------------------------------------------------------------ precedence
def _identifier_key(part: str) -> tuple[int, int, str]:
    # SemVer 11.4: numeric identifiers compare numerically and rank below alphanumeric ones
    return (0, int(part), "") if part.isdigit() else (1, 0, part)


def precedence_key(version: str) -> tuple[Any, ...]:
    """A sort key ordering versions by SemVer 2.0.0 precedence (section 11): numeric
    MAJOR.MINOR.PATCH, a pre-release below its release, pre-release identifiers
    field by field (numbers below text, a shorter run below a longer one with
    the same start); build metadata is ignored, so ``1.0.0+a`` and ``1.0.0+b``
    have equal keys. ``ValueError`` naming the version for anything not semver."""
    m = SEMVER.fullmatch(version) if isinstance(version, str) else None
    if m is None:
        raise ValueError(f"version {version!r} is not semver: {VERSION_RULE}")
    major, minor, patch, pre = int(m[1]), int(m[2]), int(m[3]), m[4]
    if pre is None:
        return (major, minor, patch, 1, ())  # a release ranks above all of its pre-releases
    return (major, minor, patch, 0, tuple(_identifier_key(p) for p in pre.split(".")))


def compare_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` has lower, equal or higher SemVer precedence than ``b``."""
    ka, kb = precedence_key(a), precedence_key(b)
    return (ka > kb) - (ka < kb)


def is_prerelease(version: str) -> bool:
    m = SEMVER.fullmatch(version)
    return m is not None and m[4] is not None


def newest(versions: Iterable[str], prereleases: bool = False) -> str | None:
    """The version of highest precedence (pre-releases only with ``prereleases``), or None."""
    pool = [v for v in versions if prereleases or not is_prerelease(v)]
    return max(pool, key=precedence_key) if pool else None
