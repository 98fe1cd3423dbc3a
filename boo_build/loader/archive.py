"""Reading a bundle file: one bounded streaming pass over its zstd frame and tar.

Standard library and zstandard only (with ``format.py``'s checks). A bundle
is a tar in one zstd frame; ``read_archive`` decompresses it a chunk at a
time, refuses anything past ``max_size``, unsafe member names, links and
special files, and checks the index (``format.check_index``) before
returning the members' bytes.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from typing import Any, Iterator

import zstandard

from .errors import BundleFormatError
from .format import INDEX_NAME, BundleIndex, check_index

DEFAULT_MAX_SIZE = 4 << 30  # bound on the decompressed archive

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a bundle's first bytes (a zstd frame)


@dataclass(frozen=True)
class Archive:
    """A bundle read into memory: the checked index and every member's bytes."""

    path: str
    index: dict[str, Any]  # bundle.json as read
    members: dict[str, bytes]
    compressed_size: int
    size: int  # decompressed tar size
    bundle_index: BundleIndex  # the same, typed (format.py)
    identity: tuple = ()  # the file read: (device, inode, size, mtime in ns); ``file_sha256`` checks it

    def file_sha256(self) -> str:
        """The sha256 (hex) of the file read, hashed now: a file changed since it
        was read (another identity) is refused, its hash no longer this archive's."""
        with open(self.path, "rb") as f:
            st = os.fstat(f.fileno())
            if self.identity and (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self.identity:
                raise BundleFormatError(f"{self.path} changed since it was opened: open it again")
            h = hashlib.sha256()
            for block in iter(lambda: f.read(_READ_CHUNK), b""):
                h.update(block)
        return h.hexdigest()


_READ_CHUNK = 1 << 20  # most decompressed bytes per read: how far past max_size a refusal can come
_RAISE_LIMIT = "open_bundle(..., max_size=...) or read_archive(..., max_size=...) raises it"


class BundleTooLarge(BundleFormatError):
    """A bundle refused by the ``max_size`` bound (its file, its declared or
    streamed decompressed size, or a member): ``problem`` says what passed
    ``max_size``, without the hint on how to raise it (``boo-build``'s
    commands name their ``--max-size`` instead)."""

    def __init__(self, problem: str, max_size: int, hint: str = _RAISE_LIMIT):
        self.problem, self.max_size = problem, max_size
        super().__init__(f"{problem} ({hint})" if hint else problem)


class _BoundedStream:
    """A bundle file's decompressed bytes, read forward a chunk at a time,
    counted and refused as soon as they pass ``max_size``: a frame that
    declares no size (or a false one) can expand 30000-fold, and nothing but
    the members read from the stream is kept."""

    def __init__(self, f, max_size: int, path: str):
        head = f.read(18)  # the magic and the longest frame header
        if len(head) < 4 or head[:4] != ZSTD_MAGIC:
            raise BundleFormatError(f"{path} is not a boo bundle: not a zstd file")
        try:
            declared = zstandard.frame_content_size(head)
        except zstandard.ZstdError as e:
            raise BundleFormatError(f"{path} is truncated or corrupt: unreadable zstd frame header ({e})") from None
        if declared > max_size:
            raise BundleTooLarge(f"{path} decompresses to {declared} bytes, over the limit of {max_size}", max_size)
        f.seek(0)
        self._f, self.path, self.max_size, self.declared = f, path, max_size, declared
        self.size = 0  # decompressed bytes taken from zstd so far
        self.failed = False  # zstd or the bound refused: that is the problem to report
        self._buf, self._pos = b"", 0
        d = zstandard.ZstdDecompressor()
        self._chunks: Iterator[bytes]
        if declared >= 0:  # pack.py's frames: that frame only, what follows is ignored (as decompress() did)
            self._chunks = d.read_to_iter(f, write_size=_READ_CHUNK)
        else:  # no size recorded: every frame in the file
            self._chunks = iter(functools.partial(d.stream_reader(f, read_across_frames=True, closefd=False).read,
                                                  _READ_CHUNK), b"")

    def _next_chunk(self) -> bytes:
        try:
            chunk = next(self._chunks, b"")
        except zstandard.ZstdError as e:
            self.failed = True
            raise BundleFormatError(f"{self.path} is truncated or corrupt: {e}") from None
        self.size += len(chunk)
        if self.size > self.max_size:
            self.failed = True
            raise BundleTooLarge(f"{self.path} decompresses to more than {self.max_size} bytes, over the limit",
                                 self.max_size, f"a damaged or hostile file, or a larger bundle: {_RAISE_LIMIT}")
        if 0 <= self.declared < self.size:
            self.failed = True
            raise BundleFormatError(f"{self.path} is corrupt: it decompresses to more than the {self.declared} "
                                    "bytes its zstd header declares")
        return chunk

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (the rest of the current chunk for -1); b"" at the end."""
        if self._pos >= len(self._buf):
            self._buf, self._pos = self._next_chunk(), 0
        end = len(self._buf) if n < 0 else self._pos + n
        data = self._buf[self._pos:end]
        self._pos += len(data)
        return data

    def finish(self) -> None:
        """Read to the end (zstd checks the frame's checksum there), then the
        declared size and that the file holds the whole frame (a file cut in
        its checksum decodes in full, and zstd's streaming readers do not say)."""
        self._buf, self._pos = b"", 0
        while self._next_chunk():
            pass
        if self.declared < 0:
            return
        if self.declared != self.size:
            raise BundleFormatError(f"{self.path} is truncated or corrupt: it decompresses to {self.size} of the "
                                    f"{self.declared} bytes its zstd header declares")
        end, have = _frame_end(self._f.fileno(), self.declared), os.fstat(self._f.fileno()).st_size
        if end is not None and end > have:
            raise BundleFormatError(f"{self.path} is truncated: {have} of the {end} bytes of its zstd frame")


def _frame_end(fd: int, declared: int) -> int | None:
    """Where the zstd frame at the start of file ``fd`` ends, from its block
    headers (RFC 8878, 3.1.1); None past a block per 4 KiB declared (no encoder
    writes such blocks: give up rather than walk them in Python)."""
    head = os.pread(fd, 18, 0)
    pos = zstandard.frame_header_size(head)
    for _ in range(declared // 4096 + 64):
        h = os.pread(fd, 3, pos)
        if len(h) < 3:
            return pos + 3
        v = int.from_bytes(h, "little")  # bit 0: last block; bits 1-2: type (1: RLE, one byte); bits 3-23: size
        pos += 3 + (1 if (v >> 1) & 3 == 1 else v >> 3)
        if v & 1:
            return pos + 4 * zstandard.get_frame_parameters(head).has_checksum
    return None


def _check_member_name(name: str, path: str) -> None:
    bad = ""
    if not name or name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        bad = "an absolute or non-POSIX path"
    elif any(part in ("..", ".", "") for part in name.split("/")):
        bad = "a path with '..', '.' or an empty component"
    if bad:
        raise BundleFormatError(f"{path}: member {name!r} has {bad}; refusing the bundle")


def read_archive(path: str | os.PathLike, max_size: int = DEFAULT_MAX_SIZE) -> Archive:
    """Read, decompress and check a bundle (format, member names and types, index).

    One streaming pass: decompressed bytes are counted as they come and refused
    as soon as they pass ``max_size``; only the members are kept, so memory
    peaks at about the decompressed size, whatever the file claims."""
    path_s = str(path)
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size > max_size:
                raise BundleTooLarge(f"{path_s} is {st.st_size} bytes, over the limit of {max_size}", max_size, "")
            src = _BoundedStream(f, max_size, path_s)
            problem = None
            try:
                members, first = _read_members(src, path_s)
            except tarfile.TarError as e:
                problem = BundleFormatError(f"{path_s} is truncated or corrupt: bad tar data ({e})")
            except BundleFormatError as e:
                if src.failed:
                    raise
                problem = e
            # Read the rest even after a tar problem: a corrupt, truncated or
            # oversized stream explains it and is reported first.
            src.finish()
            if problem is not None:
                raise problem from None
    except OSError as e:
        raise BundleFormatError(f"cannot read bundle {path_s}: {e.strerror or e}") from None
    if first is None:
        raise BundleFormatError(f"{path_s} is empty: no members")
    if first != INDEX_NAME:
        raise BundleFormatError(f"{path_s}: first member is {first!r}, expected {INDEX_NAME}")
    try:
        index = json.loads(members[INDEX_NAME])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleFormatError(f"{path_s}: {INDEX_NAME} is not valid JSON ({e})") from None
    typed = check_index(index, members, path_s)
    return Archive(path_s, index, members, st.st_size, src.size, typed,
                   (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


def _read_members(src: _BoundedStream, path: str) -> tuple[dict[str, bytes], str | None]:
    """Every regular member of the tar in ``src`` (checked names and types) and the first one's name."""
    members: dict[str, bytes] = {}
    first: str | None = None
    # Stream mode: one forward pass, a member at a time, no copy of the whole tar.
    # stream mode only reads; the stub wants a whole IO[bytes] for every read mode
    with tarfile.open(fileobj=src, mode="r|") as tf:  # type: ignore[call-overload]
        for ti in tf:
            _check_member_name(ti.name, path)
            if ti.isdir():
                continue
            if ti.issym() or ti.islnk():
                raise BundleFormatError(f"{path}: member {ti.name!r} is a link (to {ti.linkname!r}); "
                                        "refusing the bundle")
            if not ti.isreg():
                raise BundleFormatError(f"{path}: member {ti.name!r} is a device or special file; "
                                        "refusing the bundle")
            if ti.name in members:
                raise BundleFormatError(f"{path}: member {ti.name!r} appears twice")
            if ti.offset_data + ti.size > src.max_size:  # refuse before reading it
                raise BundleTooLarge(f"{path}: member {ti.name!r} has {ti.size} bytes, past the limit of "
                                     f"{src.max_size} decompressed bytes", src.max_size)
            # Chunks into a BytesIO, which grows in place and hands over its
            # buffer: a large member is not held twice.
            f, out, left = tf.extractfile(ti), io.BytesIO(), ti.size
            while left > 0 and (chunk := f.read(min(left, _READ_CHUNK))):
                out.write(chunk)
                left -= len(chunk)
            data = out.getvalue()
            if len(data) != ti.size:
                raise BundleFormatError(f"{path} is truncated: member {ti.name!r} has "
                                        f"{len(data)} of {ti.size} bytes")
            members[ti.name] = data
            first = first or ti.name
    return members, first


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verify_members(archive: Archive) -> list[tuple[str, str, str]]:
    """(member, expected, actual) of every vmfb whose checksum does not match."""
    bad = []
    for _, _, _, m in archive.bundle_index.impl_records():
        actual = sha256_hex(archive.members[m.member])
        if actual != m.sha256:
            bad.append((m.member, m.sha256, actual))
    return sorted(set(bad))


__all__ = ["Archive", "BundleTooLarge", "DEFAULT_MAX_SIZE", "read_archive", "sha256_hex", "verify_members"]
