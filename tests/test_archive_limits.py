"""The archive reader's size bound holds in memory, not just in the end:
decompressed bytes are streamed, counted and refused as soon as they pass
``max_size``, and only the members are kept.

Real zstd frames made with zstandard's streaming compressor, which records no
content size (the case a declared size cannot refuse up front).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
import tracemalloc

import pytest
import zstandard
from helpers import REPO

from boo_build.loader.archive import read_archive
from boo_build.loader.errors import BundleFormatError
from boo_build.stages.pack import compress, tar_bytes

MiB = 1 << 20
INDEX = json.dumps({"format": "boo-bundle", "format_version": 1, "targets": {}, "kernels": {}}).encode()


def _no_size_frame(chunks) -> bytes:
    """One zstd frame of the concatenated ``chunks``, without a content size."""
    cobj = zstandard.ZstdCompressor(level=1).compressobj()
    out = b"".join(cobj.compress(c) for c in chunks) + cobj.flush()
    assert zstandard.frame_content_size(out) == -1
    return out


def test_refusal_stops_within_a_chunk_and_keeps_nothing(tmp_path):
    limit = 16 * MiB
    # Zeros end the tar at once, so everything after is only read to count it.
    # Past one chunk beyond the bound the file is garbage: a reader that went
    # further before refusing would report corruption, not the limit.
    frame = _no_size_frame([bytes(limit + MiB)])  # MiB: the reader's chunk (bundle._READ_CHUNK)
    p = tmp_path / "bomb.tar.zst"
    p.write_bytes(frame + b"garbage past the bound")
    tracemalloc.start()
    try:
        with pytest.raises(BundleFormatError) as ei:
            read_archive(p, max_size=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MiB, f"peak {peak} bytes allocated while refusing a {limit}-byte bound"
    msg = str(ei.value)
    assert str(p) in msg and f"more than {limit} bytes, over the limit" in msg and "max_size=" in msg


def test_valid_archive_without_size_holds_only_its_members(tmp_path):
    big = bytes(range(256)) * (12 * MiB // 256)  # one 12 MiB member, read in chunks
    raw = tar_bytes([("bundle.json", INDEX), ("kernels/big.vmfb", big)])
    p = tmp_path / "ok.tar.zst"
    p.write_bytes(_no_size_frame([raw[i:i + MiB] for i in range(0, len(raw), MiB)]))
    tracemalloc.start()
    try:
        a = read_archive(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert a.members["kernels/big.vmfb"] == big and a.size == len(raw) and a.compressed_size == p.stat().st_size
    # The member kept plus a few chunks: no second copy of the tar or of the member.
    assert peak < len(big) + 6 * MiB, f"peak {peak} bytes for {len(raw)} decompressed"
    with pytest.raises(BundleFormatError, match="over the limit"):
        read_archive(p, max_size=len(raw) - 1)


def test_member_larger_than_the_bound_is_refused_before_reading(tmp_path):
    # A tar header claiming 64 MiB, then nothing: refused by the bound, from the header.
    def header(name, size):
        ti = tarfile.TarInfo(name)
        ti.size = size
        return ti.tobuf(tarfile.PAX_FORMAT)

    raw = header("bundle.json", len(INDEX)) + INDEX + bytes(-len(INDEX) % 512) + header("kernels/huge.vmfb", 64 * MiB)
    p = tmp_path / "huge.tar.zst"
    p.write_bytes(_no_size_frame([raw]))
    with pytest.raises(BundleFormatError, match=r"member 'kernels/huge.vmfb' has 67108864 bytes, past the limit "
                                                 r"of 16777216 decompressed bytes \(open_bundle"):
        read_archive(p, max_size=16 * MiB)


@pytest.mark.slow
def test_five_gib_bomb_refused_in_bounded_memory(tmp_path):
    """A 5 GiB stream of zeros (~160 KB on disk, about a second to make):
    open_bundle refuses it at the default 4 GiB bound with a flat peak RSS."""
    p = tmp_path / "bomb.tar.zst"
    zeros = bytes(64 * MiB)
    with open(p, "wb") as f, zstandard.ZstdCompressor(level=1).stream_writer(f, closefd=False) as w:
        for _ in range(5 * 1024 // 64):
            w.write(zeros)
    del zeros
    assert p.stat().st_size < 1 * MiB
    code = textwrap.dedent("""
        import sys
        from boo_build.loader import BundleFormatError, open_bundle
        try:
            open_bundle(sys.argv[1])
            print("OPENED")
        except BundleFormatError as e:
            print("REFUSED", e)
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the
        # (v)forking parent, here pytest with torch loaded.
        hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
        print("MAXRSS_KB", hwm.split()[1])
    """)
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rss_mb = int(lines[-1].split()[1]) / 1024
    assert rss_mb < 300, f"peak RSS {rss_mb:.0f} MB opening a 5 GiB bomb"
    assert lines[0].startswith(f"REFUSED {p} decompresses to more than {4 << 30} bytes, over the limit"), out.stdout
    assert "max_size=" in lines[0]


def test_declared_size_frame_cut_in_its_checksum_or_followed_by_data(tmp_path):
    """pack.py's frames (declared size, checksum): streaming decodes a frame cut
    in its last 4 bytes in full, and it is still refused; bytes after the
    frame are still ignored."""
    raw = tar_bytes([("bundle.json", INDEX), ("kernels/k.vmfb", bytes(range(256)) * 64)])
    data = compress(raw)
    for cut in (1, 4):
        p = tmp_path / f"cut{cut}.tar.zst"
        p.write_bytes(data[:-cut])
        with pytest.raises(BundleFormatError, match=f"{p} is truncated: {len(data) - cut} of the {len(data)} bytes"):
            read_archive(p)
    p = tmp_path / "trailing.tar.zst"
    p.write_bytes(data + b"trailing bytes")
    assert read_archive(p).size == len(raw)
