"""The report page: one self-contained HTML file with charts, from a build
folder (``OUT/<bundle>/``) or from a bundle file alone.

Both sources become one ``PageData`` (plain records) and one renderer draws
it, so a bundle gives the same page as its build for everything the bundle
records; what it does not record (compile times, the devices of the build
machine) is marked "not recorded". Charts are drawn by matplotlib (imported
only when a page is drawn; Agg canvas, SVG inlined), never fetched: the page
needs no network.

The page embeds a digest of the data it shows (``<meta name="boo-report-inputs">``):
the build's ``page`` task is up to date when the digest of the records now
equals the one in the page, so a no-op rebuild reads a few JSON files and
never imports matplotlib.

This module takes paths and records (the sources, the digest, the build's
page task and ``boo-build report``); ``page_data`` holds the records and the
page model, ``page_charts`` the charts, ``page_html`` the HTML. It does not
import ``report`` or ``tasks``.

Optional benchmark-record fields read by the page (see docs/ARCHITECTURE.md),
which later stages write when they measure them:

* ``sizes``: a dynamic kernel's timings at each benchmark shape, as builds
  record them (also on a torch-eager record), plotted against each shape's
  rows; or ``row_timings``: ``[{"rows": int, "median_s": float, ...}]``;
* ``bytes_moved`` (int, bytes one call reads plus writes) and
  ``peak_bandwidth_Bps`` (float, the device's peak memory bandwidth), and
  optionally ``device_name``: achieved bandwidth ``bytes_moved / median_s``
  as a share of the peak. In a bundle index, a target entry's ``measured``
  (``{"bytes", "device"}``) and ``provenance.measured.<target>.peak_gbs``
  (what ``boo-build measure`` records) fill them in for its implementations.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from ..candidates import module_file
from ..errors import ReportError
from ..files import read_json, write_atomic
from ..layout import Layout
from ..signature import KernelSignature, ModuleId
from .page_data import (
    DIGEST_META,
    Compile,
    Measurement,
    PageData,
    bundle_info,
    has_extra_fields,
    kernels_from_entries,
    kernels_from_index,
    parse_csv,
    target_order,
)
from .page_html import render

PAGE_NAME = "report.html"
AUTO = "auto"  # from_build(bundle=AUTO): use the bundle file beside the folder if it was packed from it

# Every module whose code decides what the page shows, in a fixed order: the
# digest hashes their source, so a change to any of them redraws the page.
PAGE_MODULES = ("page", "page_data", "page_charts", "page_html")

# Names tests and callers import from here (the page's public surface).
__all__ = ["AUTO", "PAGE_NAME", "digest", "embedded_digest", "find_build_root", "from_build", "from_bundle", "page_action", "page_current", "write_page"]



# ----------------------------------------------------------------- sources
def from_bundle(path: Path | str) -> PageData:
    """Page data of a bundle file alone (``BundleFormatError`` if unreadable)."""
    from ..loader import read_archive  # the loader's archive reader: one definition of the format

    path = Path(path)
    a = read_archive(path)
    ix = a.index
    kernels, meas = kernels_from_index(ix)
    csv_name = ix.get("csv")
    table = parse_csv(a.members[csv_name]) if csv_name and csv_name in a.members else None
    return PageData(
        name=ix["name"], version=ix["version"], source=f"bundle file {path.name}",
        targets={n: {"driver": t.get("driver"), "arch": t.get("arch"), "flags": list(t.get("flags") or ())}
                 for n, t in sorted(ix["targets"].items(), key=lambda kv: target_order(kv[0]))},
        provenance=ix.get("provenance") or {}, kernels=kernels, table=table, compiles=None, devices=None,
        bundle=bundle_info(path), bundle_note="", measurements=meas)


def find_build_root(folder: Path) -> Path:
    """The bundle folder (holding build-report.json) in ``folder`` or just under it."""
    folder = Path(folder)
    if (folder / "build-report.json").is_file():
        return folder
    found = sorted(p.parent for p in folder.glob("*/build-report.json"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise ReportError(f"{folder}: no build-report.json here or in a folder under it; "
                          "give a bundle file or a build's output folder (run boo-build build first)")
    raise ReportError(f"{folder} holds several builds ({', '.join(p.name for p in found)}): "
                      f"name one, e.g. {found[0]}")


def from_build(root: Path | str, bundle: Path | str | None = AUTO, bundle_note: str = "") -> PageData:
    """Page data of a build folder ``OUT/<bundle name>/``.

    ``bundle``: the bundle file this build packed; None: none (``bundle_note``
    says why); ``AUTO``: ``OUT/<name>-<version>.tar.zst`` when it was packed
    from these records (its index holds the same kernels), else none.
    """
    from ..stages.pack import bundle_filename, entries_from_report, provenance_from_report

    root = Path(root)
    report = read_json(root / "build-report.json")
    if not report or report.get("format") != "boo-build-report":
        raise ReportError(f"{root / 'build-report.json'} is missing or not a build report; "
                          "run boo-build build (or bench) first")
    lay = Layout(root.parent, root.name)
    targets, entries, _ = entries_from_report(report, root)
    kernels = kernels_from_entries(entries)
    name, version = report["bundle"]["name"], report["bundle"]["version"]

    compiles, meas = [], []
    for k in report["kernels"]:
        sig = KernelSignature.from_json(k["signature"])
        for t, te in sorted(k["targets"].items()):
            # every module compiled for it, variants included (``impl[+variant]``): the count the build's log gives
            for module in dict.fromkeys([*k["impls"], *(te.get("impls") or {})]):
                impl, _, variant = module.partition("+")
                mid = ModuleId(sig, impl)
                rec = read_json(lay.compile_record(t, mid, variant)) or {}
                if variant and not rec:
                    continue  # a variant not compiled (left out on purpose, or another target's)
                err = (rec.get("error") or rec.get("reason") or "").strip().splitlines()
                compiles.append(Compile(module_file(mid.key, variant), t, rec.get("status", "missing"),
                                        rec.get("seconds"), err[0][:300] if err else ""))
                if variant:
                    continue  # the bench records below are the baselines'
                bench = ((te.get("impls") or {}).get(impl) or {}).get("bench")
                if has_extra_fields(bench):
                    meas.append(Measurement(k["key"], t, impl, bench))
            if has_extra_fields(te.get("eager")):
                meas.append(Measurement(k["key"], t, "eager", te["eager"]))

    devices = {}
    for t, d in sorted(report["targets"].items()):
        dev = d.get("device")
        devices[t] = (f"{dev.get('name') or dev.get('uri')} ({dev.get('driver')}, {dev.get('arch')})"
                      if dev else d.get("device_status") or "no device")

    info = None
    if bundle == AUTO:
        candidate = root.parent / bundle_filename(name, version)
        bundle, bundle_note = None, bundle_note or "no bundle file: the build has not packed one"
        if candidate.is_file():
            try:
                other = from_bundle(candidate)
            except ValueError as e:  # BundleFormatError
                bundle_note = f"{candidate.name} is not readable: {e}"
            else:
                if other.kernels == kernels:
                    info = other.bundle
                else:
                    bundle_note = f"{candidate.name} was packed from other build results than these"
    elif bundle is not None:
        info = bundle_info(Path(bundle))
    csv_path = lay.csv
    return PageData(
        name=name, version=version, source=f"build folder {root.resolve().name}/",
        targets={t.name: {"driver": t.driver, "arch": t.arch, "flags": list(t.flags)}
                 for t in sorted(targets, key=lambda t: target_order(t.name))},
        provenance=provenance_from_report(report), kernels=kernels,
        table=parse_csv(csv_path.read_bytes()) if csv_path.is_file() else None,
        compiles=tuple(compiles), devices=devices, bundle=info, bundle_note="" if info else bundle_note,
        measurements=tuple(meas))


# ------------------------------------------------------------ up to date
def digest(data: PageData) -> str:
    """sha256 of what the page shows and of the code that draws it."""
    h = hashlib.sha256()
    for name in PAGE_MODULES:
        h.update(Path(__file__).with_name(f"{name}.py").read_bytes())
    h.update(json.dumps(asdict(data), sort_keys=True, default=str).encode())
    return h.hexdigest()


_META_RE = re.compile(rf'<meta name="{DIGEST_META}" content="([0-9a-f]+)"')


def embedded_digest(page: Path) -> str | None:
    try:
        with open(page, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    m = _META_RE.search(head)
    return m.group(1) if m else None


def write_page(data: PageData, out: Path | str) -> bool:
    """Draw ``data`` into ``out`` unless the page there already shows it; True if written."""
    out = Path(out)
    d = digest(data)
    if embedded_digest(out) == d:
        return False
    write_atomic(out, render(data, d).encode())
    return True


def page_current(root: Path | str, bundle: Path | str | None) -> Callable[..., bool]:
    """doit uptodate check of the page task: the page shows the records as they are now."""

    def check(task, values) -> bool:  # noqa: ARG001 (doit's signature)
        try:
            return embedded_digest(Path(root) / PAGE_NAME) == digest(from_build(root, bundle))
        except (OSError, ValueError, KeyError):
            return False

    check.__name__ = f"page_current({Path(root).name})"
    return check


def page_action(root: str, bundle: str | None) -> bool:
    """The build's page task: the page of this build and the bundle it packed."""
    write_page(from_build(root, bundle), Path(root) / PAGE_NAME)
    return True
