"""``boo-build report BUNDLE_OR_OUTPUT_DIR [--out FILE]``: the HTML report page.

Exit status 0; a source the page cannot be drawn from raises ``ReportError``
or ``BundleFormatError`` (exit 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ReportError

__all__ = ["add_arguments", "cmd_report", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", type=Path, metavar="BUNDLE_OR_OUTPUT_DIR",
                   help="a bundle, or a build's output folder (its per-bundle folders' records)")
    p.add_argument("--out", type=Path, help="page to write (default: report.html in the build folder, "
                                            "NAME-VERSION.report.html beside a bundle)")


def run(ns: argparse.Namespace) -> int:
    return cmd_report(ns.source, ns.out)


def cmd_report(source: Path | str, out: Path | str | None = None) -> int:
    """Write the page of a bundle file or a build's output folder; print its path."""
    from ..report.page import PAGE_NAME, find_build_root, from_build, from_bundle, write_page

    source = Path(source)
    if source.is_dir():
        root = find_build_root(source)
        data = from_build(root)
        page = Path(out) if out else root / PAGE_NAME
    elif source.is_file():
        data = from_bundle(source)
        page = Path(out) if out else source.with_name(source.name.removesuffix(".tar.zst") + ".report.html")
    else:
        raise ReportError(f"{source}: no such bundle file or build folder")
    write_page(data, page)
    print(page)
    return 0
