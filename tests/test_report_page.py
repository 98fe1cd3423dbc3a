"""The HTML report page (boo_build.report.page): written by a real build
(real export, compile, validation on the CPU, benchmarks; a planted error and
a target without a device), redrawn only when what it shows changed, and the
same from the bundle file alone. Fixture records fill the sections whose
record fields later stages write (dynamic-shape timings, GPU bandwidth)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import boo, compiles, env

from boo_build.stages.torch_modules import PLANT_ERROR_ENV

MANIFEST = """
[bundle]
name = "small"
version = "0.1.0"
targets = ["cpu", "gfx942"]

[[kernels]]
op = "layer_norm"
input_shape = [4, 6, 10]
dtype = "float32"
masks = [1, 14]

[[kernels]]
op = "rms_norm"
input_shape = [3, 37]
dtype = "float32"
masks = [1]
impls = ["manual"]
"""
# With the planted error (forward kernels of the manual implementation):
# layer_norm m1 keeps aten on cpu; the rms kernel has no implementation left
# on cpu (a failed kernel); gfx942 has no device here (not run).
RMS = "rms_norm-f32-3x37-n37-w-m1"
# the planted error, and torch.compile's baseline timed for every CPU kernel (the tests' builds time it nowhere else)
BUILD_ENV = {PLANT_ERROR_ENV: "1", "BOO_COMPILE_BUDGET": "4"}
LN1 = "layer_norm-f32-4x6x10-n10-wb-m1"


class Page(HTMLParser):
    """Text per section and per figure, every URL-bearing attribute, and the tags seen."""

    def __init__(self, text: str):
        super().__init__()
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self.sections: dict[str, list[str]] = {}
        self.figures: dict[str, list[str]] = {}
        self.svgs: dict[str, int] = {}
        self.metas: dict[str, str] = {}
        self.text: list[str] = []
        self._open: list[tuple[str, str, str]] = []  # (tag, kind, id)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action", "poster", "data") and v is not None:
                self.urls.append(v)
            if v and "url(" in v:
                self.urls += re.findall(r"url\(([^)]*)\)", v)
        if tag == "meta" and "name" in a:
            self.metas[a["name"]] = a.get("content", "")
        if tag == "section":
            self._open.append((tag, "section", a.get("id", "")))
            self.sections[a.get("id", "")] = []
        elif tag == "figure":
            self._open.append((tag, "figure", a.get("id", "")))
            self.figures[a.get("id", "")] = []
        elif tag == "svg":
            fig = next((i for _, k, i in reversed(self._open) if k == "figure"), None)
            if fig is not None:
                self.svgs[fig] = self.svgs.get(fig, 0) + 1

    def handle_endtag(self, tag):
        if tag in ("section", "figure") and self._open and self._open[-1][0] == tag:
            self._open.pop()

    def handle_data(self, data):
        if tag_text := data.strip():
            self.text.append(tag_text)
            for _, kind, ident in self._open:
                (self.sections if kind == "section" else self.figures)[ident].append(tag_text)

    def section(self, ident: str) -> str:
        return " ".join(self.sections[ident])

    def figure(self, ident: str) -> str:
        return " ".join(self.figures[ident])


def parse(path: Path) -> Page:
    text = path.read_text()
    # styles may hold url() outside attributes
    page = Page(text)
    page.urls += re.findall(r"url\(([^)]*)\)", text)
    return page


def assert_self_contained(page: Page) -> None:
    assert not [u for u in page.urls if re.match(r"\s*['\"]?\s*(https?:)?//", u)], page.urls
    assert not page.tags & {"script", "link", "iframe", "img", "object", "embed"}


@pytest.fixture(scope="module")
@compiles
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("page")
    (d / "small.toml").write_text(MANIFEST)
    proc = boo("build", "small.toml", "--out", "out", "--allow-missing", cwd=d, extra_env=BUILD_ENV)
    return d, proc


def test_build_writes_a_self_contained_page_with_every_kernel_and_target(built):
    d, proc = built
    page_path = d / "out/small/report.html"
    assert "out/small/report.html" in proc.stdout.splitlines()[-2]
    page = parse(page_path)
    assert_self_contained(page)
    report = json.loads((d / "out/small/build-report.json").read_text())
    keys = [k["key"] for k in report["kernels"]]
    assert len(keys) == 3
    for key in keys:
        assert key in page.figure("chart-validation")  # a row of the matrix
        assert key in page.section("bundle")
    for t in ("cpu", "gfx942"):
        assert t in page.figure("chart-validation") and t in page.section("speedup")
    # the speed-up and validation charts are inline SVG
    assert page.svgs.get("chart-speedup-cpu") == 1 and page.svgs.get("chart-validation") == 1
    assert page.svgs.get("chart-compile") == 1
    speedup = page.figure("chart-speedup-cpu")
    # each measured kernel's shipped implementation (LN1 ships aten, or a variant of it: manual fails)
    assert "layer_norm-f32-4x6x10-n10-wb-m14" in speedup and LN1 in speedup and "aten" in speedup
    # the sections whose records do not exist yet say so
    assert "No dynamic-shape timings" in page.section("dynamic")
    assert "No GPU bandwidth figures" in page.section("bandwidth")
    assert "sha256" in page.section("bundle") and "small-0.1.0.tar.zst" in page.section("bundle")
    assert "not run: no device (gfx942)" in page.section("bundle")  # the build machine's devices


def test_the_build_times_torch_compile_for_every_cpu_kernel_and_every_view_shows_it(built):
    """torch.compile of each kernel's op joins its paired rounds on the CPU: the index carries the
    verdict torch.compile(backend="boo") decides on, and info, bench.csv and the page the figure."""
    from boo_build.loader.archive import read_archive
    from boo_build.stages.comparison import COMPILED, COMPILED_CALL, RoundsRecord

    d, proc = built
    assert "2 of them against torch.compile too" in proc.stdout, proc.stdout[-2000:]  # the build's summary
    rounds = [RoundsRecord.from_json(json.loads(p.read_text())) for p in (d / "out/small").rglob("cpu/*.rounds.json")]
    assert len(rounds) == 3
    for r in rounds:
        if r.preference:  # a candidate to compare (the rms kernel has none left: the planted error)
            # and its call's fixed cost in the same rounds, subtracted by the verdict (kept in the record)
            assert all(len(size.times[COMPILED]) == len(size.times[COMPILED_CALL]) == size.n for size in r.sizes), \
                r.signature
    timed = [r.signature for r in rounds if r.preference]
    assert len(timed) == 2 and RMS not in timed
    ix = read_archive(d / "out/small-0.1.0.tar.zst").bundle_index
    for key in timed:
        vs = ix.kernels[key].targets["cpu"].vs_compiled
        assert vs is not None and vs.timed and vs.compiled_s and "kernel/torch.compile" in vs.reason, key
        assert vs.op_s > vs.compiled_s > 0 and vs.call_s > 0 and "less its call's fixed cost" in vs.reason, key
        assert "compiled" in (ix.kernels[key].targets["cpu"].timing or {})
    rows = (d / "out/small/bench.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert {"speedup_vs_compile", "compile_verdict"} <= set(header)
    col = header.index("speedup_vs_compile")
    assert sum(1 for row in rows[1:] if row.split(",")[col]) == 2
    info = boo("info", "out/small-0.1.0.tar.zst", cwd=d).stdout
    assert info.count("speed-up over torch.compile:") == 2 and info.count("speed-up over torch eager:") == 2
    assert "torch.compile(backend='boo'):" in info
    assert parse(d / "out/small/report.html").section("speedup").count("rounds)") >= 4  # both figures, both kernels


def test_failed_kernel_and_deviceless_target_are_shown_honestly(built):
    d, proc = built
    page = parse(d / "out/small/report.html")
    matrix = page.figure("chart-validation")
    assert "FAILED" in matrix  # the rms kernel on cpu
    assert matrix.count("not run") == 3 + 1  # every kernel on gfx942, and the legend
    assert "0.066*" in matrix or re.search(r"\b0\.\d+\*", matrix)  # LN1: aten passed, manual failed
    val = page.section("validation")
    assert re.search(rf"failed : {RMS} on cpu , no implementation left: manual: failed validation: .*worst at", val)
    # aten ships, as compiled or as its nosd variant, whichever was faster (candidates)
    assert re.search(rf"manual failed : {LN1} on cpu \(still available: aten(\+nosd)? ships\)", val)
    assert "gfx942 : 3 kernels — not run: no device (gfx942)" in val
    assert "gfx942: not measured — not run: no device (gfx942)" in page.section("speedup")
    build = page.section("build")
    assert f"Missing kernels (1) {RMS} on cpu : manual: failed validation" in build
    # every module compiled, variants included: as many as the build's compile records (and its log's count)
    built_n = re.search(r"compile\s+built (\d+)", proc.stdout)
    records = len(list((d / "out/small/vmfb").rglob("*.compile.json")))
    assert f"{records} compiles (" in build and records > 10
    assert built_n is None or int(built_n.group(1)) == records, proc.stdout[-3000:]


def test_bundle_alone_gives_the_same_page(built):
    d, _ = built
    proc = boo("report", "out/small-0.1.0.tar.zst", "--out", "alone.html", cwd=d)
    assert proc.stdout.strip() == "alone.html"
    alone_text = (d / "alone.html").read_text()
    build_text = (d / "out/small/report.html").read_text()
    alone, full = parse(d / "alone.html"), parse(d / "out/small/report.html")
    assert_self_contained(alone)
    for ident in ("speedup", "validation", "dynamic", "bandwidth"):  # recorded by the bundle: identical
        cut = re.compile(rf'<section id="{ident}">.*?</section>', re.S)
        assert cut.search(alone_text).group(0) == cut.search(build_text).group(0), ident
    assert "Compile times: not recorded" in alone.section("build") and "chart-compile" not in alone.figures
    assert alone.section("build").split("Missing kernels")[1] == full.section("build").split("Missing kernels")[1]
    sha = re.compile(r"\b[0-9a-f]{64}\b")
    assert sha.findall(alone.section("bundle")) == sha.findall(full.section("bundle")) != []
    assert "not run: no device (gfx942)" not in alone.section("bundle")  # the build machine's devices:
    assert "not recorded" in alone.section("bundle")  # not in the bundle


def test_noop_rebuild_leaves_the_page_alone(built):
    d, _ = built
    page = d / "out/small/report.html"
    before, digest = page.stat(), parse(page).metas["boo-report-inputs"]
    boo("build", "small.toml", "--out", "out", "--allow-missing", cwd=d, extra_env=BUILD_ENV)
    after = page.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)


def test_up_to_date_check_reads_records_without_matplotlib(built):
    d, _ = built
    code = ("import sys; from boo_build.report.page import page_current; "
            f"ok = page_current({str(d / 'out/small')!r}, {str(d / 'out/small-0.1.0.tar.zst')!r})(None, {{}}); "
            "print(ok, 'matplotlib' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["True", "False"], proc.stderr


def test_failed_build_draws_the_page_without_a_bundle_and_a_later_build_restores_it(built):
    d, _ = built
    page = d / "out/small/report.html"
    proc = boo("build", "small.toml", "--out", "out", cwd=d, check=False, extra_env=BUILD_ENV)
    assert proc.returncode != 0
    failed = parse(page)
    assert re.search(r"no bundle : not written: 1 requested kernel\(s\) missing", failed.section("bundle"))
    assert "FAILED" in failed.figure("chart-validation")
    # the same records with a bundle again: the page shows it (not the failed build's page)
    boo("build", "small.toml", "--out", "out", "--allow-missing", cwd=d, extra_env=BUILD_ENV)
    again = parse(page)
    assert "no bundle" not in again.section("bundle") and "small-0.1.0.tar.zst" in again.section("bundle")


# ------------------------------------------------------- fixture records
PEAK = 4.8e12


def _bench(subject: str, sig: str, target: str, median: float, **extra) -> dict:
    return {"subject": subject, "signature": sig, "target": target, "status": "ok", "reason": "",
            "min_s": median, "median_s": median, "p90_s": median, "reps": 50, "threads": 0, **extra}


def test_fixture_bundle_fills_dynamic_and_bandwidth_sections(tmp_path):
    """Bench records with the optional fields (docs/ARCHITECTURE.md) in a bundle
    fill the dynamic-shape and GPU-bandwidth sections."""
    from boo_build.loader.format import TargetRecord
    from boo_build.report.page import from_bundle, write_page
    from boo_build.signature import KernelSignature, ModuleId
    from boo_build.stages.pack import kernel_record, pack_bundle, packed_impl
    from boo_build.targets import catalogue

    sig = KernelSignature(op="layer_norm", input_shape=(4096, 768), normalized_shape=(768,), dtype="bfloat16",
                          mask=1)
    vmfb = tmp_path / "k.vmfb"
    vmfb.write_bytes(b"fixture vmfb, never loaded")
    val = {"module": ModuleId(sig, "manual").key, "target": "gfx942", "status": "passed", "reason": "",
           "tolerance": {}, "outputs": [{"name": "output", "case": "seed0", "ratio": 0.25, "ok": True}]}
    # 24 MB in 10 us on a 4.8 TB/s device: 2.4 TB/s, 50 % of the peak
    bench = _bench(ModuleId(sig, "manual").key, sig.key, "gfx942", 1e-5, bytes_moved=24_000_000,
                   peak_bandwidth_Bps=PEAK, device_name="AMD Instinct MI300X",
                   row_timings=[{"rows": r, "median_s": 2e-6 + r * 2e-9} for r in (1, 64, 1024, 4096)])
    vmfbs: dict[str, bytes] = {}
    impl = packed_impl(vmfbs, "gfx942", sig, "manual", vmfb, validation=val, benchmark=bench)
    entry = TargetRecord.available("manual", {"manual": impl}, "fastest validated: 10.0 us")
    cat = catalogue()
    path = pack_bundle(tmp_path, name="fixture", version="1.0.0", targets=[cat["gfx942"]],
                       kernels=[kernel_record(sig, {"gfx942": entry})], vmfbs=vmfbs,
                       provenance={"benchmarks": "ran"}, csv_bytes=None)
    out = tmp_path / "page.html"
    assert write_page(from_bundle(path), out)
    page = parse(out)
    assert_self_contained(page)
    assert page.svgs.get("chart-dynamic") == 1 and page.svgs.get("chart-bandwidth") == 1
    bw = page.figure("chart-bandwidth")
    assert "50%" in bw and "2.40 TB/s of 4.80 TB/s" in bw and "AMD Instinct MI300X" in bw
    assert sig.key in page.figure("chart-dynamic") and "manual" in page.figure("chart-dynamic")
    # no bench.csv in this bundle: the speed-up section says so rather than drawing nothing
    assert "no benchmark table (bench.csv) recorded" in page.section("speedup")
    assert "0.25" in page.figure("chart-validation")  # worst error as a share of the tolerance
    assert not write_page(from_bundle(path), out)  # nothing changed: not redrawn


def test_fixture_build_records_fill_dynamic_section_with_eager(built, tmp_path):
    """The build folder's records (every implementation and torch eager) feed the sections too."""
    from boo_build.report.page import from_build, write_page

    d, _ = built
    root = tmp_path / "small"
    shutil.copytree(d / "out/small", root)
    rep = json.loads((root / "build-report.json").read_text())
    k = next(k for k in rep["kernels"] if k["key"].endswith("-m14"))
    cpu = k["targets"]["cpu"]
    rows = [{"rows": r, "median_s": r * 1e-7} for r in (4, 16, 64)]
    cpu["eager"]["row_timings"] = rows
    cpu["impls"]["aten"]["bench"]["row_timings"] = [{**p, "median_s": p["median_s"] / 2} for p in rows]
    (root / "build-report.json").write_text(json.dumps(rep))
    out = root / "report.html"
    assert write_page(from_build(root, None, "fixture"), out)
    page = parse(out)
    fig = page.figure("chart-dynamic")
    assert k["key"] in fig and "aten" in fig and "eager" in fig and "manual" not in fig
    assert "No GPU bandwidth figures" in page.section("bandwidth")


def test_report_command_refuses_what_it_cannot_read(tmp_path, capsys):
    from boo_build.cli import main

    def cmd_report(source):  # the command as a user runs it: errors become messages, exit 2
        return main(["report", str(source)])

    assert cmd_report(tmp_path / "nope.tar.zst") == 2
    assert "no such bundle file or build folder" in capsys.readouterr().err
    (tmp_path / "junk.tar.zst").write_bytes(b"not a bundle")
    assert cmd_report(tmp_path / "junk.tar.zst") == 2
    assert "junk.tar.zst is not a boo bundle" in capsys.readouterr().err
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "build-report.json").write_text("{}")
    assert cmd_report(tmp_path) == 2
    assert "several builds (a, b)" in capsys.readouterr().err
    assert cmd_report(tmp_path / "a") == 2
    assert "not a build report" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.html"))


def test_bandwidth_from_a_measured_bundle_index(tmp_path):
    """Where a bundle index records a target's measurement the way ``boo-build
    measure`` does (``measured.bytes``, ``provenance.measured.<target>.peak_gbs``),
    the benchmark records of its implementations get the bandwidth fields."""
    from boo_build.report.page_data import BYTES_MOVED, DEVICE_NAME, PEAK_BANDWIDTH, kernels_from_index

    bench = _bench("k-aten", "k", "sm_80", 2e-5)
    entry = {"status": "available", "selected": "aten", "reason": "fastest", "rejected": {},
             "impls": {"aten": {"validation": None, "benchmark": bench}},
             "measured": {"device": "NVIDIA H200", "bytes": 96_000_000}}
    sig = {"op": "layer_norm", "input_shape": [4096, 768], "normalized_shape": [768], "dtype": "float32", "mask": 1}
    index = {"kernels": {"k": {"signature": sig, "targets": {"sm_80": entry, "cpu": {**entry, "measured": None}}}},
             "provenance": {"measured": {"sm_80": {"peak_gbs": 4800.0}}}}
    (kernel,), meas = kernels_from_index(index)
    (m,) = meas  # the cpu entry records no measurement
    assert (m.target, m.subject) == ("sm_80", "aten")
    assert m.record[BYTES_MOVED] == 96_000_000 and m.record[PEAK_BANDWIDTH] == 4.8e12
    assert m.record[DEVICE_NAME] == "NVIDIA H200" and m.record["median_s"] == 2e-5


def test_the_page_says_where_torch_tensors_go_instead_of_the_kernel(built, tmp_path):
    import dataclasses

    from helpers import rewrite, with_prefer_eager

    from boo_build.loader.archive import read_archive
    from boo_build.report.page import from_bundle, write_page

    d, _ = built
    ix = read_archive(d / "out/small-0.1.0.tar.zst").bundle_index
    key = next(k for k in sorted(ix.kernels) if ix.kernels[k].targets["cpu"].is_available)
    # the same bundle with and without prefer_eager on one kernel
    plain = ix.with_entry(key, "cpu", dataclasses.replace(ix.kernels[key].targets["cpu"], prefer_eager=None)).to_json()
    src = rewrite(d / "out/small-0.1.0.tar.zst", tmp_path / "plain.tar.zst",
                  index=lambda j: (j.clear(), j.update(plain)))
    routed = with_prefer_eager(src, tmp_path / "routed.tar.zst", [key])
    row = re.compile(rf"<tr><td><code>{re.escape(key)}</code>.*?</tr>", re.S)
    for bundle, note in ((src, False), (routed, True)):
        assert write_page(from_bundle(bundle), tmp_path / "page.html")
        assert ("(torch tensors: torch eager)" in row.search((tmp_path / "page.html").read_text()).group(0)) == note


def test_dynamic_timings_come_from_the_records_sizes():
    """A build records a dynamic kernel's timings per benchmark shape (``sizes``): the page
    plots them by the rows of each shape, at the time the selection compares (the mean per
    call), skipping sizes that did not run; ``row_timings`` (rows, median) is read where given."""
    from boo_build.records import BenchResult, BenchStatus, SizeTiming
    from boo_build.report.page_data import Measurement, has_extra_fields, row_points

    key = "layer_norm-f32-BATCHxSEQx64-n64-wb-m1"
    sizes = (SizeTiming((1, 1, 64), BenchStatus.OK, median_s=2e-6, mean_s=3e-6),
             SizeTiming((4, 16, 64), BenchStatus.OK, median_s=5e-6, mean_s=6e-6),
             SizeTiming((8, 512, 64), BenchStatus.ERROR, reason="boom"))
    rec = BenchResult(subject=f"{key}-aten", signature=key, target="cpu", status=BenchStatus.OK, mean_s=3e-6,
                      sizes=sizes).to_json()
    assert has_extra_fields(rec)
    assert row_points(Measurement(key, "cpu", "aten", rec)) == [(1, 3e-6), (64, 6e-6)]
    legacy = {"row_timings": [{"rows": 64, "median_s": 5e-6}, {"rows": 1, "median_s": 2e-6}, {"rows": "x"}]}
    assert row_points(Measurement(key, "cpu", "aten", legacy)) == [(1, 2e-6), (64, 5e-6)]
    assert not has_extra_fields({"mean_s": 1e-6})
