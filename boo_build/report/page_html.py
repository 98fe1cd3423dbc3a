"""The report page's HTML: one self-contained page (CSS inline, charts as
inline SVG from ``page_charts``) drawn from ``PageData``.
"""

from __future__ import annotations

import html
import re
import threading
from collections import Counter
from typing import Any, Mapping, Sequence

from ..candidates import Candidate, module_file
from ..compared import COMPILED_NAME, VsEager
from ..reasons import Kind
from ..signature import ModuleId, residual_key
from .page_charts import RC, chart_bandwidth, chart_compiles, chart_rows, chart_speedup, chart_validation
from .page_data import (
    DIGEST_META,
    Measurement,
    PageData,
    bandwidth_rows,
    cell_state,
    impl_failures,
    number,
    row_points,
    speedups,
    target_order,
    timing_line,
    vs_eager,
    why_not_measured,
)


# -------------------------------------------------------------------- html
def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _size(n: float | None) -> str:
    if n is None:
        return "not recorded"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _figure_html(fig_id: str, svg: str, caption: str) -> str:
    return (f'<figure class="chart" id="{_e(fig_id)}">{svg}'
            f"<figcaption>{caption}</figcaption></figure>")


def _table(head: Sequence[str] | None, rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    """A table of HTML cells (escaped by the caller); ``head`` None: no header row."""
    th = "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead>" if head else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}">{th}<tbody>{body}</tbody></table>'


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", s)


CSS = """
:root{--fg:#1d1d1f;--muted:#666;--line:#ddd;--bad:#a40000;--ok:#1a7f37}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
 margin:0 auto;padding:24px 28px 48px;max-width:1180px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:36px 0 8px;padding-top:8px;border-top:2px solid #222}
h3{font-size:16px;margin:22px 0 6px}
.sub{color:var(--muted);margin:0 0 14px}
code,.mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:13px}
nav{margin:12px 0 6px;font-size:14px}nav a{margin-right:14px;color:#0b57d0;text-decoration:none}
.stats{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0 0;padding:0;list-style:none}
.stats li{border:1px solid var(--line);border-radius:6px;padding:6px 12px;background:#fafafa}
.stats b{font-size:18px;margin-right:4px}.stats .bad b{color:var(--bad)}.stats .ok b{color:var(--ok)}
figure.chart{margin:8px 0 18px;break-inside:avoid;page-break-inside:avoid}
figure.chart svg{max-width:100%;height:auto;display:block}
figcaption{color:var(--muted);font-size:13px;margin-top:4px}
.note{color:var(--muted);font-style:italic}
.missing{color:var(--muted);border-left:3px solid var(--line);padding:2px 10px}
table{border-collapse:collapse;margin:6px 0 14px;font-size:13px;width:100%}
table.facts td:first-child{width:13em;white-space:nowrap}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
ul.problems li{margin:3px 0}.bad{color:var(--bad)}
.flags{font-size:12px;color:#444;word-break:break-all}
@media print{body{padding:0;max-width:none;font-size:11px}nav{display:none}
 h2{break-before:auto;break-after:avoid}h3{break-after:avoid}table{font-size:10px}a{color:inherit}}
"""


# matplotlib's rcParams are process-wide: pages drawn by parallel page tasks take turns.
_DRAW_LOCK = threading.Lock()


def render(data: PageData, digest_hex: str) -> str:
    """The page as HTML text (draws the charts: imports matplotlib)."""
    import matplotlib

    with _DRAW_LOCK, matplotlib.rc_context(RC):
        body = _body(data)
    from .. import __version__

    title = f"{data.name} {data.version}: kernel report"
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f'<meta name="{DIGEST_META}" content="{digest_hex}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style></head>\n<body>\n{body}\n"
        f'<footer class="note">Drawn by boo-build {_e(__version__)} with matplotlib '
        f"{_e(matplotlib.__version__)} from the {_e(data.source)}.</footer>\n</body></html>\n")


def _body(data: PageData) -> str:
    states = [(k, t, cell_state(c)) for k in data.kernels for t, c in k.cells.items()]
    count = Counter(s.state for _, _, s in states)
    avail = sum(1 for k in data.kernels for c in k.cells.values() if c.status == "available")
    failed_impls = sum(len(s.other_failed) for *_, s in states if s.state in ("passed", "not run"))
    out = [f"<header><h1>{_e(data.name)} {_e(data.version)}</h1>",
           f'<p class="sub">Kernel report, drawn from the {_e(data.source)}.</p>',
           '<ul class="stats">',
           f"<li><b>{len(data.kernels)}</b> kernels</li>",
           f"<li><b>{len(data.targets)}</b> targets: {_e(', '.join(data.targets))}</li>",
           f"<li><b>{avail}</b> of {len(states)} available</li>",
           f'<li class="ok"><b>{count["passed"]}</b> validated</li>',
           f'<li class="{"bad" if count["failed"] else ""}"><b>{count["failed"]}</b> failed validation</li>',
           f'<li class="{"bad" if failed_impls else ""}"><b>{failed_impls}</b> implementation'
           f'{"s" if failed_impls != 1 else ""} failed, kernel kept</li>',
           f"<li><b>{count['not run']}</b> not run</li>",
           f'<li class="{"bad" if count["not built"] + count["unavailable"] else ""}">'
           f'<b>{count["not built"] + count["unavailable"]}</b> not built or unavailable</li></ul>',
           '<nav><a href="#speedup">Speed-up</a><a href="#validation">Validation</a><a href="#build">Build</a>'
           '<a href="#bundle">Bundle</a><a href="#dynamic">Dynamic shapes</a>'
           '<a href="#bandwidth">GPU bandwidth</a><a href="#traffic">GPU traffic</a></nav></header>']
    out += _section_speedup(data)
    out += _section_validation(data, states)
    out += _section_build(data, states)
    out += _section_bundle(data)
    out += _section_dynamic(data)
    out += _section_bandwidth(data)
    out += _section_traffic(data)
    return "\n".join(out)


def _section_speedup(data: PageData) -> list[str]:
    out = ['<section id="speedup"><h2>Speed-up over torch eager</h2>',
           '<p>Per target, every kernel: the speed-up of the implementation the bundle ships over torch eager '
           'as the selection compared them, in paired rounds: the median of the per-round ratios of torch '
           'eager\'s time to the kernel\'s, with its ~95&nbsp;% interval (the table under the chart), the '
           'figure <code>boo-build info</code>, <code>bench.csv</code> and <code>boo-build diff</code> show. '
           'Bars start at 1&times;: right of the line the kernel is faster. Kernels timed without paired '
           'rounds (older records) show every implementation\'s median time against torch eager\'s, from '
           '<code>bench.csv</code>. The table also gives the speed-up over <code>torch.compile</code>\'s code for '
           'the op, timed in the same rounds: <code>torch.compile(backend="boo")</code> decides against it, '
           '<code>replace_norms</code> and the loader\'s entry points against torch eager.</p>']
    if any(residual_key(k.key) for k in data.kernels):
        out.append('<p class="note">A fused residual kernel (<code>-res-</code> in its key: '
                   '<code>h = x + residual</code>, then the norm) is compared with torch eager\'s add, then the '
                   'norm; its backward with the norm\'s backward and the add of <code>grad_h</code> (the gradient '
                   'h gets from its other users).</p>')
    for t in data.targets:
        rows = speedups(data, t)
        out.append(f"<h3>{_e(t)}</h3>")
        how = timing_line(data, t)
        if how:
            out.append(f'<p class="note">Timings: {_e(how)}.</p>')
        if rows:
            # a selected None is no key: get gives the default, which the stub's key type cannot say
            below = sum(1 for _, d, sel in rows if d.get(sel, max(d.values())) < 1)  # type: ignore[arg-type, misc]
            out.append(_figure_html(f"chart-speedup-{_slug(t)}", chart_speedup(rows, f"su-{_slug(t)}"),
                                    f"{_e(t)}: {len(rows)} kernels measured; "
                                    f"{below} where the shipped implementation is slower than eager."))
            out += _figures_table(data, t)
            unmeasured = [k.key for k in data.kernels if t in k.cells and k.key not in {r[0] for r in rows}]
            if unmeasured:
                out.append(f'<p class="note">Not measured on {_e(t)}: '
                           + ", ".join(f"<code>{_e(k)}</code>" for k in unmeasured) + "</p>")
        else:
            out.append(f'<p class="missing">{_e(t)}: not measured &mdash; {_e(why_not_measured(data, t))}.</p>')
    out.append("</section>")
    return out


def _figures_table(data: PageData, target: str) -> list[str]:
    """The chart's figures in words: per kernel timed in paired rounds, the speed-up over torch
    eager with its interval and rounds, the verdict, and where torch calls run (the loader's entry
    points, ``replace_norms``); and the speed-up over torch.compile's code in the same rounds, what
    ``torch.compile(backend="boo")`` decides on (or why it was not timed)."""
    rows = [(k.key, c, vs) for k in data.kernels if (c := k.cells.get(target)) is not None
            and (vs := vs_eager(c)) is not None]
    if not rows:
        return []
    out = ['<table class="figures"><tr><th>kernel</th><th>shipped</th><th>speed-up over torch eager '
           '(interval, rounds)</th><th>verdict</th><th>torch calls run</th><th>speed-up over torch.compile '
           '(interval, rounds)</th><th>verdict</th></tr>']
    for key, c, vs in rows:
        vc = VsEager.from_timing(c.timing, COMPILED_NAME)
        compiled = (f"<td>{_e(vc.figure()) if vc.recorded else 'not recorded (unconfirmed)'}</td>"
                    f"<td>{_e(vc.verdict)}</td>" if vc is not None else
                    f"<td colspan=\"2\">{_e(VsEager.untimed(c.timing) or 'not timed')}</td>")
        out.append(f"<tr class=\"figure\"><td><code>{_e(key)}</code></td><td>{_e(c.selected or '')}</td>"
                   f"<td>{_e(vs.figure()) if vs.recorded else 'not recorded (unconfirmed)'}</td>"
                   f"<td>{_e(vs.verdict)}</td><td>{_e(c.torch_calls or 'the kernel')}</td>{compiled}</tr>")
    return out + ["</table>"]


def _section_validation(data: PageData, states) -> list[str]:
    out = ['<section id="validation"><h2>Validation</h2>',
           "<p>Each kernel on each target, as shipped: the number is the worst error of the selected "
           "implementation as a share of its tolerance (&le; 1 passes; every output, every case, against a "
           "float64 reference). <b>*</b> marks a kernel whose other implementation failed.</p>"]
    if data.kernels and data.targets:
        out.append(_figure_html("chart-validation", chart_validation(data, "val"),
                                "Validation matrix, kernel &times; target."))
    problems = []
    for k, t, s in states:
        if s.state == "failed":
            problems.append(f'<li><span class="bad">failed</span>: <code>{_e(k.key)}</code> on '
                            f"<b>{_e(t)}</b>, no implementation left: {_e(s.detail)}</li>")
    for k, t, impl, why in impl_failures(data, "validation"):
        if k.cells[t].status == "available":
            problems.append(f'<li><span class="bad">{_e(impl)} failed</span>: <code>{_e(k.key)}</code> on '
                            f"<b>{_e(t)}</b> (still available: {_e(k.cells[t].selected)} ships): {_e(why)}</li>")
    if problems:
        out.append("<h3>Failures</h3><ul class=\"problems\">" + "".join(problems) + "</ul>")
    else:
        out.append('<p class="note">Nothing failed validation.</p>')
    not_run = Counter((t, s.detail) for k, t, s in states if s.state == "not run")
    if not_run:
        out.append("<h3>Not run</h3><ul>" + "".join(
            f"<li><b>{_e(t)}</b>: {n} kernel{'s' if n != 1 else ''} &mdash; {_e(why)}</li>"
            for (t, why), n in sorted(not_run.items())) + "</ul>")
    out.append("</section>")
    return out


def _section_build(data: PageData, states) -> list[str]:
    out = ['<section id="build"><h2>Build</h2>']
    if data.compiles is None:
        out.append('<p class="missing">Compile times: not recorded (the bundle does not record them; '
                   "run <code>boo-build report</code> on the build's output folder).</p>")
    else:
        timed = [c for c in data.compiles if c.seconds is not None]
        total = sum(c.seconds for c in timed)  # type: ignore[misc]  # timed: each has seconds
        out.append(f"<p>{len(data.compiles)} compiles ({len(timed)} timed), {total:.1f} s of compiler time "
                   "in all (times of the run that last compiled each module).</p>")
        if timed:
            out.append(_figure_html("chart-compile", chart_compiles(data, "cc"),
                                    "Compile time per target: the total, and each compile."))
            slow = sorted(timed, key=lambda c: -c.seconds)[:10]  # type: ignore[operator]  # timed: each has seconds
            out.append("<h3>Slowest compiles</h3>" + _table(
                ("seconds", "module", "target", "status"),
                [(f"{c.seconds:.2f}", f"<code>{_e(c.module)}</code>", _e(c.target),
                  _e(c.status) if c.status == "ok" else f'<span class="bad">{_e(c.status)}</span>')
                 for c in slow]))
    failed = impl_failures(data, "build")
    if failed:
        out.append(f'<h3>Failed to build ({len(failed)})</h3><ul class="problems">' + "".join(
            f"<li><code>{_e(_module_name(k.signature, impl))}</code> on <b>{_e(t)}</b>: "
            f'<span class="bad">{_e(why)}</span></li>' for k, t, impl, why in failed) + "</ul>")
    missing = [(k, t, s) for k, t, s in states if k.cells[t].status == "unavailable"]
    if missing:
        out.append(f'<h3>Missing kernels ({len(missing)})</h3><ul class="problems">' + "".join(
            f"<li><code>{_e(k.key)}</code> on <b>{_e(t)}</b>: {_e(s.detail)}</li>" for k, t, s in missing)
                   + "</ul>")
    if not failed and not missing:
        out.append('<p class="note">Everything built; every requested kernel is available on every target.</p>')
    out.append("</section>")
    return out


def _module_name(sig, name: str) -> str:
    """A candidate's module file stem: ``<module key>[+<variant>]``."""
    c = Candidate.parse(name)
    return module_file(ModuleId(sig, c.impl).key, c.variant)


def _section_bundle(data: PageData) -> list[str]:
    prov = data.provenance or {}
    versions = found if isinstance(found := prov.get("versions"), Mapping) else {}
    b = data.bundle
    facts = [("name", _e(data.name)), ("version", _e(data.version))]
    if b:
        facts += [("file", f"<code>{_e(b['file'])}</code>"),
                  ("size", f"{_size(b['size'])} compressed, {_size(b.get('unpacked'))} unpacked"),
                  ("sha256", f"<code>{_e(b['sha256'])}</code>")]
    else:
        facts.append(("file", f'<span class="bad">no bundle</span>: {_e(data.bundle_note)}'))
    facts += [("manifest", _e(prov.get("manifest", "not recorded"))),
              ("benchmarks", _e(prov.get("benchmarks", "not recorded"))),
              ("iree-compile", f"<code>{_e(prov.get('iree_compile', 'not recorded'))}</code>")]
    facts += [(_e(k), _e(v)) for k, v in sorted(versions.items())]
    out = ['<section id="bundle"><h2>Bundle</h2>',
           _table(None, [(f"<b>{k}</b>", v) for k, v in facts], "facts")]
    trows = []
    for t, d in data.targets.items():
        cells = [k.cells[t] for k in data.kernels if t in k.cells]
        dev = "not recorded" if data.devices is None else data.devices.get(t, "not recorded")
        trows.append((f"<b>{_e(t)}</b>", _e(d.get("driver")), _e(d.get("arch")), _e(dev),
                      sum(c.status == "available" for c in cells), sum(c.status != "available" for c in cells),
                      f'<span class="flags">{_e(" ".join(d.get("flags") or ()))}</span>'))
    out.append("<h3>Targets</h3>" + _table(("target", "driver", "arch", "device on the build machine",
                                             "available", "unavailable", "iree-compile flags"), trows))
    targets = list(data.targets)
    krows = []
    for k in data.kernels:
        s = k.signature
        shipped = []
        for t in targets:
            c = k.cells.get(t)
            if c is None:
                shipped.append("&mdash;")
            elif c.status == "available":
                # chosen without measuring: the default, or the least modelled traffic
                how = {Kind.UNMEASURED: "default", Kind.MODELLED: "modelled"}.get(c.reason.kind, "")
                shipped.append(_e(c.selected) + (f' <span class="note">({how})</span>' if how else "")
                               + "".join(f' <span class="note">({_e(d.rpartition("$")[2])}: {_e(cfg)})</span>'
                                         for d, cfg in sorted(c.tuning.items()))
                               + (f' <span class="note">(torch tensors: {_e(c.torch_calls)})</span>'
                                  if c.torch_calls else ""))
            else:
                shipped.append('<span class="bad">unavailable</span>')
        krows.append((f"<code>{_e(k.key)}</code>", _e(s.op), _e(s.dtype), _e("[" + ", ".join(map(str, s.input_shape)) + "]"),
                      _e(s.mask), *shipped))
    out.append("<h3>Kernels (implementation shipped per target; where the build found torch eager faster, "
               "the loader sends torch tensors there)</h3>"
               + _table(("kernel", "op", "dtype", "shape", "mask", *targets), krows, "kernels"))
    out.append("</section>")
    return out


def _section_dynamic(data: PageData) -> list[str]:
    out = ['<section id="dynamic"><h2>Dynamic shapes: time against rows</h2>']
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in data.measurements:
        if row_points(m):
            groups.setdefault((m.kernel, m.target), []).append(m)
    if groups:
        g = [(k, t, sorted(ms, key=lambda m: m.subject))
             for (k, t), ms in sorted(groups.items(), key=lambda kv: (kv[0][0], target_order(kv[0][1])))]
        out.append(_figure_html("chart-dynamic", chart_rows(g, "dyn"),
                                f"Time per call at each row count (the time the selection compares), {len(g)} "
                                "dynamic kernel(s) (log-log)."))
    else:
        out.append('<p class="missing">No dynamic-shape timings in these records: a dynamic kernel is timed '
                   "at several sizes when the build benchmarks it.</p>")
    out.append("</section>")
    return out


def _section_bandwidth(data: PageData) -> list[str]:
    out = ['<section id="bandwidth"><h2>GPU bandwidth: share of the device\'s peak</h2>']
    rows = bandwidth_rows(data)
    if rows:
        out.append(_figure_html("chart-bandwidth", chart_bandwidth(rows, "bw"),
                                "Bytes each call reads and writes, divided by its median time, "
                                "as a share of the device's peak memory bandwidth."))
    else:
        out.append('<p class="missing">No GPU bandwidth figures: no benchmark in these records ran on a GPU '
                   "(a figure needs a kernel timed on the device, with the bytes a call moves and the device's peak "
                   "bandwidth; <code>boo-build measure</code> on a GPU machine records them).</p>")
    out.append("</section>")
    return out


def _section_traffic(data: PageData) -> list[str]:
    out = ['<section id="traffic"><h2>GPU traffic per call (modelled, not measured)</h2>',
           '<p class="note">From what iree-compile emits for each GPU kernel (no device): dispatches launched per '
           "call and the bytes they read and write, each binding counted once per op that reads it, against the "
           "minimal bytes (each input read once, each output written once). Reuse through caches is not seen. "
           "Where no device measured a target, the implementation with the least modelled traffic ships as its "
           "default.</p>"]
    rows = []
    for k in data.kernels:
        for t in sorted(k.cells, key=target_order):
            c = k.cells[t]
            if not c.traffic:
                continue
            models = "; ".join(
                f"{i}: {m.get('dispatches')} dispatch{'es' if m.get('dispatches') != 1 else ''}, "
                f"{_size(number(m.get('modelled_bytes')))}, {number(m.get('ratio')) or 0:.2f}x minimal"
                for i, m in c.traffic.items())
            minimal = next(iter(c.traffic.values())).get("minimal_bytes")
            rows.append((k.key, t, c.selected or "none", models, _size(number(minimal))))
    if rows:
        out.append(_table(("kernel", "target", "shipped", "per implementation", "minimal"), rows))
    else:
        out.append('<p class="missing">No traffic models in these records (a GPU implementation\'s '
                   "<code>traffic</code> field).</p>")
    out.append("</section>")
    return out
