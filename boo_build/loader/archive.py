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
from .format import INDEX_NAME, SPLIT_FORMAT_VERSION, BundleIndex, check_format, check_index
from .frames import ZSTD_MAGIC, Head, check_member_name, frame_end, is_tar_end, members_of, read_frame, split_head
from .split_format import BundleHeader, Frame, route_json

DEFAULT_MAX_SIZE = 4 << 30  # bound on the decompressed archive


@dataclass(frozen=True)
class Archive:
    """A bundle read into memory: the checked index and every member's bytes."""

    path: str
    index: dict[str, Any]  # bundle.json as read (format 5: records.json, the whole index)
    members: dict[str, bytes]
    compressed_size: int
    size: int  # decompressed tar size
    bundle_index: BundleIndex  # the same, typed (format.py)
    identity: tuple = ()  # the file read: (device, inode, size, mtime in ns); ``file_sha256`` checks it
    header: BundleHeader | None = None  # format 5: bundle.json, the header (split_format.py)

    @property
    def parts(self) -> frozenset[str]:
        """A format-5 bundle's members that hold its index (records, routes), not kernels."""
        h = self.header
        if h is None or h.records is None:
            return frozenset()
        return frozenset([h.records.member, *(p.member for p in h.routes.values())])

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
        end, have = frame_end(self._f.fileno(), self.declared), os.fstat(self._f.fileno()).st_size
        if end is not None and end > have:
            raise BundleFormatError(f"{self.path} is truncated: {have} of the {end} bytes of its zstd frame")


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
            head = split_head(f.fileno(), path_s, INDEX_NAME)
            split = None if head is None else _read_split(f.fileno(), st, head, path_s, max_size)
            if split is not None:
                return split
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
    if check_format(index, path_s) >= SPLIT_FORMAT_VERSION:
        raise BundleFormatError(f"{path_s}: a format-{index['format_version']} bundle holds each member in a zstd "
                                "frame of its own, its header first, as boo-build packs it; this one does not")
    typed = check_index(index, members, path_s)
    return Archive(path_s, index, members, st.st_size, src.size, typed,
                   (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


def load_json(data: bytes, path: str, name: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleFormatError(f"{path}: {name} is not valid JSON ({e})") from None


def split_header(head: Head, path: str) -> BundleHeader | None:
    """The header of a first frame holding ``bundle.json`` alone (``frames.split_head``);
    None where its index is of an older format (read whole)."""
    index = load_json(head.data, path, INDEX_NAME)
    if isinstance(index, dict) and type(index.get("format_version")) is int and index["format_version"] < \
            SPLIT_FORMAT_VERSION:
        return None
    return BundleHeader.from_json(index, path)


def check_extent(header: BundleHeader, head: Head, file_size: int, path: str, max_size: int) -> None:
    """The file ends where the header says, and decompresses within ``max_size``."""
    if head.usize + header.frames_unpacked > max_size:
        raise BundleTooLarge(f"{path} decompresses to {head.usize + header.frames_unpacked} bytes, over the "
                             f"limit of {max_size}", max_size)
    if file_size != head.end + header.frames_bytes:
        raise BundleFormatError(f"{path} is truncated or corrupt: {file_size} bytes, its header says "
                                f"{head.end + header.frames_bytes}")


def _read_split(fd: int, st: os.stat_result, head: Head, path: str, max_size: int) -> Archive | None:
    """A format-5 bundle read whole (None: its first frame's index is older: read it
    as one stream): every frame in turn, each one member, then what the header names
    (where, sha256, size), the records (``check_index``), and that the header and
    each target's routes say what the records say."""
    header = split_header(head, path)
    if header is None:
        return None
    check_extent(header, head, st.st_size, path, max_size)
    members, frames = {INDEX_NAME: head.data}, {}
    pos, total, ended = head.end, head.usize, False
    while pos < st.st_size and not ended:
        try:
            declared = zstandard.frame_content_size(os.pread(fd, 18, pos))
        except zstandard.ZstdError as e:
            raise BundleFormatError(f"{path} is corrupt: no zstd frame at byte {pos} ({e})") from None
        if declared < 0:
            raise BundleFormatError(f"{path} is corrupt: the frame at byte {pos} does not declare its size")
        if total + declared > max_size:
            raise BundleTooLarge(f"{path} decompresses to more than {max_size} bytes, over the limit", max_size)
        end = frame_end(fd, declared, pos)
        if end is None or end > st.st_size:
            raise BundleFormatError(f"{path} is truncated or corrupt: the frame at byte {pos}")
        what = f"the frame at byte {pos}"
        chunk = read_frame(fd, pos, end - pos, declared, path, what)
        total += declared
        if is_tar_end(chunk):
            ended = end == st.st_size
            if not ended:
                raise BundleFormatError(f"{path} is corrupt: frames after the tar's end")
            break
        for name, data, at in members_of(chunk, path, what):
            if name in members:
                raise BundleFormatError(f"{path}: member {name!r} appears twice")
            members[name], frames[name] = data, Frame(pos - head.end, end - pos, declared, at)
        pos = end
    if not ended:
        raise BundleFormatError(f"{path} is truncated: no end of the tar")
    assert header.records is not None  # a format-5 header
    for part in (header.records, *header.routes.values()):
        held = members.get(part.member)
        if held is None:
            raise BundleFormatError(f"{path}: member {part.member} named by the header is missing")
        if frames[part.member] != part.frame or len(held) != part.size or sha256_hex(held) != part.sha256:
            raise BundleFormatError(f"{path}: member {part.member} is not the one the header names "
                                    "(its place, size or sha256 differ)")
    index = load_json(members[header.records.member], path, header.records.member)
    typed = check_index(index, members, path, header.records.member)
    problem = header.disagreement(typed) or (
        "" if header.frames_unpacked == total - head.usize else "the header's frames.unpacked is not the tar's")
    for t, part in header.routes.items():
        if not problem and load_json(members[part.member], path, part.member) != route_json(typed, t, frames):
            problem = f"{part.member} does not route as the records select"
    if problem:
        raise BundleFormatError(f"{path}: {problem}")
    return Archive(path, index, members, st.st_size, total, typed,
                   (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), header)


def _read_members(src: _BoundedStream, path: str) -> tuple[dict[str, bytes], str | None]:
    """Every regular member of the tar in ``src`` (checked names and types) and the first one's name."""
    members: dict[str, bytes] = {}
    first: str | None = None
    # Stream mode: one forward pass, a member at a time, no copy of the whole tar.
    # stream mode only reads; the stub wants a whole IO[bytes] for every read mode
    with tarfile.open(fileobj=src, mode="r|") as tf:  # type: ignore[call-overload]
        for ti in tf:
            check_member_name(ti.name, path)
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


__all__ = ["Archive", "BundleTooLarge", "DEFAULT_MAX_SIZE", "check_extent", "load_json", "read_archive", "sha256_hex",
           "split_header", "verify_members"]
