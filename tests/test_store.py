"""Stores, lock files and the loader's download cache (docs/store.md), against a
real HTTP server on 127.0.0.1 (a port the kernel picks) and ``file://`` stores.

The bundles are the small fixture bundle (one compiled layer-norm kernel) and
copies of it under other versions and names (``helpers.rewrite``): nothing is
compiled here. Each test gets its own cache (``BOO_BUILD_CACHE_DIR``).
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
from helpers import REPO, boo, env, flip_byte, rewrite

from boo_build.cli.app import main as cli_main
from boo_build.loader import open_bundle
from boo_build.loader.errors import (
    BundleError,
    BundleFetchError,
    BundleFormatError,
    BundleIntegrityError,
    LockFileError,
)
from boo_build.loader.lockfile import LockedBundle, LockFile, read_lock
from boo_build.loader.remote import CorruptCacheEntry, cache_entries, file_sha256
from boo_build.store import StoreError, lock, publish, read_local_index, write_lock

FIXTURE = REPO / "tests" / "fixtures" / "pre-runtime-fields-0.1.0.tar.zst"
NAME = "pre-runtime-fields"
KEY = "layer_norm-f32-2x8-n8-wb-m1"


# ------------------------------------------------------------ the HTTP store
class StoreServer:
    """A static file server over ``root`` on 127.0.0.1, counting GETs per path.
    ``modes[path]`` misbehaves for that path: "other" (other bytes, same size),
    "truncate" (half the announced body, then the connection closes), "404",
    "stall" (no answer until the test ends), "stall-body" (half the body, then
    nothing until the test ends), "slow" (answers after 0.3 s),
    "auth" (401 unless the Authorization header is ``AUTH``)."""

    AUTH = "Bearer s3cret"

    def __init__(self, root: Path):
        self.root, self.counts, self.modes = Path(root), Counter(), {}
        self.release, self.lock = threading.Event(), threading.Lock()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)  # a short poll: shutdown returns at once
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    def _handler(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = unquote(urlsplit(self.path).path).lstrip("/")
                with server.lock:
                    server.counts[path] += 1
                mode = server.modes.get(path)
                if mode == "stall":
                    server.release.wait(30)
                    return
                if mode == "slow":
                    time.sleep(0.3)
                f = server.root / path
                if mode == "404" or not f.is_file():
                    self.send_error(404)
                    return
                if mode == "auth" and self.headers.get("Authorization") != server.AUTH:
                    self.send_error(401)
                    return
                data = f.read_bytes()
                body = flip_byte(data) if mode == "other" else data
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if mode in ("truncate", "stall-body") else body)
                if mode == "stall-body":
                    self.wfile.flush()
                    server.release.wait(30)
                self.close_connection = True

        return Handler


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    """name -> version -> bundle file: the fixture under four versions and a second name."""
    d = tmp_path_factory.mktemp("bundles")

    def as_(name, version):
        return rewrite(FIXTURE, d / f"{name}-{version}.tar.zst", index=lambda ix: ix.update(name=name, version=version))

    return {NAME: {"0.1.0": FIXTURE, "0.2.0": as_(NAME, "0.2.0"), "0.3.0-rc.1": as_(NAME, "0.3.0-rc.1")},
            "other-norms": {"1.0.0": as_("other-norms", "1.0.0")}}


@pytest.fixture(scope="module")
def store(bundles, tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    for versions in bundles.values():
        for path in versions.values():
            publish(path, root)
    return root


@pytest.fixture
def server(store):
    s = StoreServer(store)
    yield s
    s.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "cache"
    monkeypatch.setenv("BOO_BUILD_CACHE_DIR", str(c))
    for var in ("BOO_OFFLINE", "BOO_STORE_URL", "BOO_STORE_AUTH", "BOO_FETCH_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")  # the test's server is never behind a proxy
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return c


def run_kernel(bundle) -> float:
    """Run the bundle's layer norm on numpy arrays: the largest error against numpy's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    w, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    out, _, _ = bundle.native_layer_norm(x, [8], w, b, 1e-5)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w + b
    assert bundle.stats()[KEY]["hits"] == 1  # the kernel ran, not a fallback
    return float(np.abs(out - ref).max())


def assert_cache_empty(cache: Path) -> None:
    assert cache_entries(cache) == []
    tmp = cache / "tmp"
    assert not (tmp.is_dir() and any(tmp.iterdir())), sorted(tmp.iterdir())


def bundle_path(name: str, version: str) -> str:
    return f"{name}/{version}/{name}-{version}.tar.zst"


# ------------------------------------------------------------------ publish
def test_publish_lays_out_the_store_and_its_index(store, bundles):
    ix = json.loads((store / "index.json").read_text())
    assert ix["format"] == "boo-store-index" and ix["format_version"] == 1
    got = [(b["name"], b["version"]) for b in ix["bundles"]]
    assert got == [("other-norms", "1.0.0"), (NAME, "0.1.0"), (NAME, "0.2.0"), (NAME, "0.3.0-rc.1")]
    for b in ix["bundles"]:
        f = store / b["path"]
        assert b["path"] == bundle_path(b["name"], b["version"])
        assert b["sha256"] == file_sha256(f) == file_sha256(bundles[b["name"]][b["version"]])
        assert b["size"] == f.stat().st_size
        assert b["targets"] == ["cpu"] and b["format_version"] == 1 and b["iree_runtime"] is None
    assert not [p for p in store.rglob("*") if p.name.endswith(".tmp")]


def test_publish_never_replaces_a_version(tmp_path, bundles):
    root = tmp_path / "store"
    first = publish(FIXTURE, root)
    again = publish(FIXTURE, root)
    assert first.new and not again.new and again.entry == first.entry
    other = rewrite(FIXTURE, tmp_path / "other.tar.zst", index=lambda ix: ix.update(provenance={"changed": 1}))
    with pytest.raises(StoreError, match="already published .* with other bytes"):
        publish(other, root)
    assert file_sha256(first.file) == file_sha256(FIXTURE)
    # a second build of one version: refused whatever the order of the build metadata
    b = rewrite(FIXTURE, tmp_path / "b.tar.zst", index=lambda ix: ix.update(version="1.0.0+b"))
    a = rewrite(FIXTURE, tmp_path / "a.tar.zst", index=lambda ix: ix.update(version="1.0.0+a"))
    publish(b, root)
    with pytest.raises(StoreError, match=r"1\.0\.0\+b is already published .*only in build metadata"):
        publish(a, root)
    assert [e.version for e in read_local_index(root).entries] == ["0.1.0", "1.0.0+b"]
    assert not (root / bundle_path(NAME, "1.0.0+a")).exists()


def test_concurrent_publishers_lose_nothing(tmp_path):
    versions = [f"0.{i}.0" for i in range(1, 5)]
    files = [rewrite(FIXTURE, tmp_path / f"{v}.tar.zst", index=lambda ix, v=v: ix.update(version=v))
             for v in versions]
    go = tmp_path / "go"
    code = textwrap.dedent("""
        import os, sys, time
        from boo_build.store import publish
        open(sys.argv[3], "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(sys.argv[4]) and time.monotonic() < deadline:
            time.sleep(0.01)
        publish(sys.argv[1], sys.argv[2])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(f), str(tmp_path / "store"), str(tmp_path / f"r{i}"),
                               str(go)], cwd=REPO, stderr=subprocess.PIPE, text=True) for i, f in enumerate(files)]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"r{i}").exists() for i in range(len(files))) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    assert sorted(e.version for e in read_local_index(tmp_path / "store").entries) == versions


# --------------------------------------------------------- lock and open
@pytest.mark.parametrize("kind", ["http", "file"])
def test_lock_newest_and_pinned_then_open_and_run(kind, store, server, cache, tmp_path):
    where = server.url if kind == "http" else store.as_uri()
    newest = lock([NAME], where)
    assert [(b.name, b.version) for b in newest.bundles] == [(NAME, "0.2.0")]  # not the pre-release 0.3.0-rc.1
    pinned = lock([f"{NAME}==0.1.0", "other-norms"], where)
    assert [(b.name, b.version) for b in pinned.bundles] == [(NAME, "0.1.0"), ("other-norms", "1.0.0")]
    write_lock(newest, tmp_path / "newest.lock")
    write_lock(pinned, tmp_path / "pinned.lock")
    assert read_lock(tmp_path / "pinned.lock") == pinned

    b_new = open_bundle(tmp_path / "newest.lock")
    b_old = open_bundle(str(tmp_path / "pinned.lock"), name=NAME)
    b_other = open_bundle(tmp_path / "pinned.lock", name="other-norms")
    assert (b_new.version, b_old.version, b_other.name) == ("0.2.0", "0.1.0", "other-norms")
    for b in (b_new, b_old, b_other):
        assert Path(b.path).is_relative_to(cache)
        assert run_kernel(b) < 1e-4
    if kind == "http":
        assert server.counts[bundle_path(NAME, "0.2.0")] == 1 and server.counts[bundle_path(NAME, "0.1.0")] == 1
    # opened again: from the cache, no request
    before = sum(server.counts.values())
    assert open_bundle(tmp_path / "newest.lock").version == "0.2.0"
    assert sum(server.counts.values()) == before
    with pytest.raises(LockFileError, match="pins 2 bundles .*pass name="):
        open_bundle(tmp_path / "pinned.lock")


def test_a_url_pinned_by_sha256_and_file_urls(store, server, cache):
    rel = bundle_path(NAME, "0.2.0")
    sha = file_sha256(store / rel)
    b = open_bundle(server.url + rel, sha256=sha)
    assert b.version == "0.2.0" and Path(b.path).is_relative_to(cache) and run_kernel(b) < 1e-4
    with pytest.raises(ValueError, match="needs sha256="):
        open_bundle(server.url + rel)
    # file:// without a pin opens the file where it is; with one, through the cache
    assert open_bundle((store / rel).as_uri()).path == str(store / rel)
    assert Path(open_bundle((store / rel).as_uri(), sha256=sha).path).is_relative_to(cache)
    # a plain path with a pin is checked in place
    assert open_bundle(store / rel, sha256=sha).path == str(store / rel)
    with pytest.raises(BundleIntegrityError, match="not the pinned bundle") as e:
        open_bundle(store / rel, sha256="0" * 64)
    assert e.value.member is None and e.value.expected == "0" * 64 and e.value.actual == sha
    # a path that is no file fails as it always has
    with pytest.raises(BundleFormatError, match="cannot read bundle .*missing.tar.zst"):
        open_bundle(store / "missing.tar.zst")
    with pytest.raises(ValueError, match="name= picks a bundle of a lock file"):
        open_bundle(store / rel, name=NAME)


@pytest.mark.slow
def test_eight_processes_one_download(store, server, cache, tmp_path):
    write_lock(lock([NAME], server.url), tmp_path / "boo.lock")
    server.modes[bundle_path(NAME, "0.2.0")] = "slow"  # the first download is still running when the others ask
    go = tmp_path / "go"
    code = textwrap.dedent(f"""
        import os, sys, time
        import numpy as np
        from boo_build.loader import open_bundle
        open(sys.argv[2], "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
            time.sleep(0.01)
        b = open_bundle(sys.argv[1])
        one, zero = np.ones(8, np.float32), np.zeros(8, np.float32)
        out, _, _ = b.native_layer_norm(np.ones((2, 8), np.float32), [8], one, zero, 1e-5)
        print(b.version, float(np.abs(out).max()))
    """)
    e = {**env(), "BOO_BUILD_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "boo.lock"), str(tmp_path / f"ready{i}")],
                              cwd=REPO, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(8)]
    deadline = time.monotonic() + 90
    while not all((tmp_path / f"ready{i}").exists() for i in range(8)) and time.monotonic() < deadline:
        time.sleep(0.02)
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        outs.append(out.split())
    assert outs == [["0.2.0", "0.0"]] * 8  # a constant row normalizes to 0
    assert server.counts[bundle_path(NAME, "0.2.0")] == 1
    assert len(cache_entries(cache)) == 1


# ------------------------------------------------------------ failures
@pytest.mark.parametrize("mode, error, message", [
    ("other", BundleIntegrityError, r"not the pinned bundle: other bytes .*expected sha256 [0-9a-f]{64}, got [0-9a-f]{64}"),
    ("truncate", BundleFetchError, r"cut short: \d+ of the \d+ bytes announced"),
    ("404", BundleFetchError, r"HTTP 404 .*no such file"),
    ("stall", BundleFetchError, r"timed out: no data for 0\.5 s"),
    ("stall-body", BundleFetchError, r"timed out: no data for 0\.5 s .*, after \d+ of \d+ bytes"),
])
def test_a_bad_download_raises_and_leaves_nothing(mode, error, message, store, server, cache, tmp_path, monkeypatch):
    rel = bundle_path(NAME, "0.1.0")
    write_lock(lock([f"{NAME}==0.1.0"], server.url), tmp_path / "boo.lock")
    server.modes[rel] = mode
    monkeypatch.setenv("BOO_FETCH_TIMEOUT", "0.5")
    t0 = time.monotonic()
    with pytest.raises(error, match=message) as e:
        open_bundle(tmp_path / "boo.lock")
    assert time.monotonic() - t0 < 10
    assert server.url + rel in str(e.value)
    if error is BundleIntegrityError:
        assert e.value.expected == file_sha256(store / rel) and e.value.actual != e.value.expected
    assert_cache_empty(cache)
    server.modes.clear()  # the store recovers: the next open downloads and runs
    assert run_kernel(open_bundle(tmp_path / "boo.lock")) < 1e-4


def test_a_size_mismatch_and_a_refused_connection(store, cache, tmp_path):
    rel = bundle_path(NAME, "0.1.0")
    real = read_lock_of(store, rel)
    wrong_size = LockFile(store.as_uri(), (LockedBundle(NAME, "0.1.0", rel, real.sha256, real.size + 1),))
    write_lock(wrong_size, tmp_path / "size.lock")
    with pytest.raises(BundleIntegrityError, match=f"announces {real.size} bytes, the pin says {real.size + 1}"):
        open_bundle(tmp_path / "size.lock")
    assert_cache_empty(cache)
    with socket.socket() as s:  # bound, never listening: connections to it are refused
        s.bind(("127.0.0.1", 0))
        write_lock(LockFile(f"http://127.0.0.1:{s.getsockname()[1]}/", (real,)), tmp_path / "refused.lock")
        with pytest.raises(BundleFetchError, match="connection refused"):
            open_bundle(tmp_path / "refused.lock")
    assert_cache_empty(cache)


def read_lock_of(store: Path, rel: str) -> LockedBundle:
    f = store / rel
    name, version = rel.split("/")[:2]
    return LockedBundle(name, version, rel, file_sha256(f), f.stat().st_size)


def test_a_changed_cache_entry_is_refused_and_fetched_again(store, server, cache, tmp_path):
    rel = bundle_path(NAME, "0.2.0")
    write_lock(lock([NAME], server.url), tmp_path / "boo.lock")
    path = Path(open_bundle(tmp_path / "boo.lock").path)
    path.write_bytes(flip_byte(path.read_bytes()))
    with pytest.warns(CorruptCacheEntry, match="changed after it was verified"):
        b = open_bundle(tmp_path / "boo.lock")
    assert server.counts[rel] == 2 and run_kernel(b) < 1e-4
    assert file_sha256(Path(b.path)) == file_sha256(store / rel)
    # offline, a changed entry cannot be replaced: refused, naming the switch
    Path(b.path).write_bytes(flip_byte(Path(b.path).read_bytes()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BOO_OFFLINE", "1")
        with pytest.raises(BundleIntegrityError, match="changed on disk.*BOO_OFFLINE"):
            open_bundle(tmp_path / "boo.lock")
    assert server.counts[rel] == 2


def test_the_cache_needs_no_server_once_filled(store, cache, tmp_path, monkeypatch):
    own = StoreServer(store)
    try:
        write_lock(lock([NAME], own.url), tmp_path / "boo.lock")
        subprocess.run([str(Path(sys.executable).parent / "boo-build"), "fetch", str(tmp_path / "boo.lock")],
                       env={**env(), "BOO_BUILD_CACHE_DIR": str(cache)}, check=True, capture_output=True, timeout=120)
        assert own.counts[bundle_path(NAME, "0.2.0")] == 1
    finally:
        own.close()
    # the server is gone: the cache serves, online or offline
    assert run_kernel(open_bundle(tmp_path / "boo.lock")) < 1e-4
    monkeypatch.setenv("BOO_OFFLINE", "1")
    assert open_bundle(tmp_path / "boo.lock").version == "0.2.0"
    write_lock(lock([f"{NAME}==0.1.0"], store.as_uri()), tmp_path / "miss.lock")
    with pytest.raises(BundleFetchError, match="not in the cache .* BOO_OFFLINE is set"):
        open_bundle(tmp_path / "miss.lock")


def test_a_mirror_and_a_private_store(store, server, cache, tmp_path, monkeypatch):
    # the lock names a store that does not exist; BOO_STORE_URL points at the mirror
    lf = lock([NAME], str(store))
    write_lock(LockFile("https://store.invalid/boo/", lf.bundles), tmp_path / "boo.lock")
    monkeypatch.setenv("BOO_STORE_URL", server.url)
    rel = bundle_path(NAME, "0.2.0")
    server.modes[rel] = "auth"
    with pytest.raises(BundleFetchError, match="HTTP 401 .*BOO_STORE_AUTH"):
        open_bundle(tmp_path / "boo.lock")
    assert_cache_empty(cache)
    monkeypatch.setenv("BOO_STORE_AUTH", StoreServer.AUTH)
    assert open_bundle(tmp_path / "boo.lock").version == "0.2.0"


# ------------------------------------------------------------ lock files
GOOD = {"format": "boo-lock", "format_version": 1, "store": "file:///s/",
        "bundles": [{"name": NAME, "version": "0.1.0", "path": bundle_path(NAME, "0.1.0"), "sha256": "a" * 64,
                     "size": 10}]}


def _with(path, value):
    d = json.loads(json.dumps(GOOD))
    *parents, last = path
    node = d
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return json.dumps(d)


@pytest.mark.parametrize("text, field, problem", [
    ("{not json", "format", "not valid JSON"),
    (_with(["format_version"], 2), "format_version", "version 2 is not one this loader reads"),
    (_with(["format"], "boo-bundle"), "format", "not a boo-build lock file"),
    (_with(["store"], "/s"), "store", "not a URL"),
    (_with(["bundles"], []), "bundles", "empty"),
    (_with(["bundles", 0, "sha256"], "abc"), "bundles[0].sha256", "not 64 lower-case hex digits"),
    (_with(["bundles", 0, "size"], "10"), "bundles[0].size", "must be a int"),
    (_with(["bundles", 0, "path"], "../x.tar.zst"), "bundles[0].path", "relative path inside the store"),
    (_with(["bundles", 0, "name"], KeyError), "bundles[0].name", "missing"),
])
def test_a_malformed_lock_file_is_refused_naming_the_field(text, field, problem, tmp_path, cache):
    p = tmp_path / "boo.lock"
    p.write_text(text)
    with pytest.raises(LockFileError) as e:
        open_bundle(p)
    assert e.value.field == field and problem in str(e.value) and str(p) in str(e.value)
    assert isinstance(e.value, BundleError)


def test_lock_file_round_trip_and_defaults():
    lf = LockFile.parse(json.dumps(GOOD))
    assert LockFile.parse(lf.dump()) == lf and json.loads(lf.dump()) == GOOD
    assert lf.url_of(lf.bundles[0], {}) == "file:///s/" + bundle_path(NAME, "0.1.0")
    assert lf.url_of(lf.bundles[0], {"BOO_STORE_URL": "http://mirror/x"}).startswith("http://mirror/x/pre-runtime")


def test_boo_bundle_may_name_a_lock_file(store, cache, tmp_path):
    write_lock(lock([NAME], str(store)), tmp_path / "boo.lock")
    code = ("from boo_build.loader import open_bundle, tokens\n"
            "tokens.use_opener(open_bundle)\n"
            "print(tokens.default_bundle().version)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**env(), "BOO_BUNDLE": str(tmp_path / "boo.lock"), "BOO_BUILD_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0.2.0"


def test_opening_a_local_bundle_imports_no_http(store, cache, tmp_path):
    write_lock(lock([NAME], str(store)), tmp_path / "file.lock")
    code = textwrap.dedent("""
        import sys
        import boo_build.loader
        from boo_build.loader import open_bundle
        http = ("urllib.request", "http.client", "http")
        seen = [sorted(m for m in http if m in sys.modules)]
        open_bundle(sys.argv[1])
        seen.append(sorted(m for m in http if m in sys.modules))
        seen.append("boo_build.loader.remote" in sys.modules)
        open_bundle(sys.argv[2])  # a lock file with a file:// store: no HTTP either
        seen.append(sorted(m for m in http if m in sys.modules))
        print(seen)
    """)
    proc = subprocess.run([sys.executable, "-c", code, str(FIXTURE), str(tmp_path / "file.lock")], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env={**env(), "BOO_BUILD_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[], [], False, []]"


# ------------------------------------------------------------------ CLI
@pytest.mark.parametrize("cmd", ["publish", "lock", "fetch", "cache"])
def test_commands_have_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main([cmd, "--help"])
    assert e.value.code == 0
    assert "usage: boo-build " + cmd in capsys.readouterr().out


def cli(*args: str, capsys) -> tuple[int, str, str]:
    code = cli_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_publish_lock_fetch_cache(tmp_path, cache, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root, lockf = tmp_path / "store", tmp_path / "boo.lock"
    code, out, _ = cli("publish", str(FIXTURE), str(root), capsys=capsys)
    assert code == 0 and f"{NAME} 0.1.0: published" in out
    code, out, _ = cli("lock", NAME, "--store", str(root), "-o", str(lockf), capsys=capsys)
    assert code == 0 and f"wrote {lockf}" in out
    assert read_lock(lockf).store == root.as_uri() + "/"
    code, out, _ = cli("fetch", str(lockf), capsys=capsys)
    assert code == 0 and "sha256 verified" in out
    code, out, _ = cli("cache", "list", capsys=capsys)
    assert code == 0 and "1 bundle(s)" in out and file_sha256(FIXTURE) in out
    code, out, _ = cli("cache", "clean", capsys=capsys)
    assert code == 0 and cache_entries(cache) == []


def test_cli_errors_name_the_culprit(tmp_path, store, cache, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever a command writes by mistake lands here
    cases = [
        (["publish", str(tmp_path / "missing.tar.zst"), str(tmp_path / "s")], "missing.tar.zst does not exist"),
        (["publish", str(FIXTURE), str(FIXTURE)], "is a file, not a folder"),
        (["publish", str(FIXTURE), "https://host/store"], "publish writes a store folder, not a URL"),
        (["publish", str(FIXTURE), str(FIXTURE / "store")], "cannot write the store"),  # under a file: unwritable
        (["lock", "nope", "--store", str(store)], "has no bundle named 'nope' (it has: other-norms, pre-runtime"),
        (["lock", f"{NAME}==9.9.9", "--store", str(store)], "no pre-runtime-fields 9.9.9 (its versions: 0.1.0, "),
        (["lock", NAME, "--store", str(tmp_path)], "is --store the store's root"),
        (["lock", NAME, "--store", str(store), "-o", str(FIXTURE / "boo.lock")], "cannot write the lock file"),
        (["fetch", str(tmp_path / "none.lock")], "none.lock does not exist: write one with `boo-build lock"),
    ]
    for args, message in cases:
        code, out, err = cli(*args, capsys=capsys)
        assert code == 2 and message in err and err.startswith("boo-build: "), (args, err)
    # a store folder that cannot be written (root ignores permissions: a read-only bind is not at hand)
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        code, _, err = cli("publish", str(FIXTURE), str(ro / "store"), capsys=capsys)
        assert code == 2 and "cannot write the store" in err


def test_cli_fetch_of_an_unreachable_store_fails_with_the_url(tmp_path, store, cache):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/"
        write_lock(LockFile(url, lock([NAME], str(store)).bundles), tmp_path / "boo.lock")
        proc = boo("fetch", str(tmp_path / "boo.lock"), cwd=tmp_path, check=False,
                   extra_env={"BOO_BUILD_CACHE_DIR": str(cache)})
    assert proc.returncode == 2
    assert f"boo-build: cannot fetch {url}{bundle_path(NAME, '0.2.0')}: connection refused" in proc.stderr
