"""The README as a user meets it: the quick start runs exactly as written,
the README stays short, and every link in it and in docs/ leads somewhere.

The quick start is the first thing a user runs, so it is run here literally
(the manifest block written to the file the build command names, the build
command through a shell, the Python block in a fresh interpreter in the same
folder). A README that drifts from the code fails here, not on a user's machine.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 220  # a front page, not a manual: the detail belongs in docs/

_BLOCK = r"<!-- quickstart: {name} -->\s*(?:<!--.*?-->\s*)*```(\w+)\n(.*?)```"
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _block(text: str, name: str) -> tuple[str, str]:
    m = re.search(_BLOCK.format(name=name), text, re.S)
    assert m, f"README.md has no block marked <!-- quickstart: {name} -->"
    return m.group(1), m.group(2)


def _env() -> dict[str, str]:
    # As the README says: the venv's bin on PATH (boo-build, and iree-compile for the build).
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("BOO_BUNDLE", None)  # the quick start names its bundle itself
    return env


@pytest.mark.build
def test_quickstart_runs_as_written(tmp_path):
    text = README.read_text()
    lang, manifest = _block(text, "manifest")
    assert lang == "toml"
    lang, build = _block(text, "build")
    assert lang in ("sh", "bash", "console")
    lang, python = _block(text, "python")
    assert lang == "python"

    # The build command names the manifest file the user was told to write.
    names = re.findall(r"(\S+\.toml)\b", build)
    assert names, f"the build command names no .toml manifest:\n{build}"
    (tmp_path / names[0]).write_text(manifest)

    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", build], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    printed = proc.stdout.strip().splitlines()
    bundle = printed[-1]
    assert bundle.endswith(".tar.zst") and (tmp_path / bundle).is_file(), proc.stdout[-2000:]
    # The README promises the page and the bundle paths are the last lines printed.
    assert printed[-2].endswith("report.html") and (tmp_path / printed[-2]).is_file(), proc.stdout[-2000:]
    # the quick start's kernels are dynamic and benchmarked at several sizes: the page draws time against rows
    html = (tmp_path / printed[-2]).read_text()
    dynamic = html[html.index('<section id="dynamic">'):]
    dynamic = dynamic[:dynamic.index("</section>")]
    assert "No dynamic-shape timings" not in dynamic and "BATCHxSEQx64" in dynamic, dynamic[:2000]
    assert f'"{bundle}"' in python, f"the Python block does not open the bundle the build printed ({bundle})"

    run = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=600)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    # each norm swapped, or left where the bundle would send every call of it to torch eager
    replaced, left = map(int, re.search(r"(\d) replaced, (\d) left", out).groups())
    assert replaced + left == 2 and left == out.count("would send every call of it to torch eager"), out
    losses = [float(v) for v in re.findall(r"step \d+ loss ([0-9.]+)", out)]
    assert len(losses) >= 2 and losses[-1] < losses[0], out
    assert "torch.Size([3, 100, 64])" in out, out
    stats = ast.literal_eval(out.strip().splitlines()[-1])
    # Every call of a swapped norm was served by the bundle, by a kernel or routed to torch eager
    # (which one is the build's measured choice on this machine), none missed:
    # per step a forward and a backward each, then a forward without grad.
    assert stats["misses"] == 0, out
    assert stats["static_hits"] + stats["dynamic_hits"] + stats["eager"] == replaced * (2 * len(losses) + 1), out
    assert "nanobind" not in run.stderr, run.stderr


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_readme_has_no_history():
    # The README describes what is; history goes to CHANGELOG.md.
    text = README.read_text()
    for pattern in (r"\bstop \d+\b", r"\b[Ii]ssue \d+\b", r"\bcommit [0-9a-f]{7,40}\b"):
        assert not re.search(pattern, text), f"README.md matches {pattern!r}: {re.search(pattern, text).group(0)}"


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code is not links
    text = re.sub(r"`[^`\n]*`", "", text)
    return _LINK.findall(text)


def test_every_docs_page_is_linked_from_readme():
    linked = {(README.parent / t.split("#")[0]).resolve() for t in _links(README)}
    pages = sorted(DOCS.glob("*.md"))
    assert pages
    missing = [p.name for p in pages if p.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"


@pytest.mark.parametrize("page", [README, REPO / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(page):
    assert page.exists(), page
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        if not (page.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: links to missing files: {broken}"
