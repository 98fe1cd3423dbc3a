"""The bundle name and version rules, written once: the manifest checks them
when it is read, pack again when it writes a bundle (whose file name is
``<name>-<version>.tar.zst``).

Pure Python (``re`` only), like ``signature``: anything may import it.
"""

from __future__ import annotations

import re
from typing import Any

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
