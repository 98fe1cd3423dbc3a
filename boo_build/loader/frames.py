"""One zstd frame of a bundle file at a time (format 5, ``split_format.py``).

``frame_end`` finds where a frame ends from its block headers; ``read_frame``
decompresses one frame read at an offset, checking its declared size and its
checksum (zstd's); ``members_of`` takes the tar members a frame holds,
``member_at`` one of them;
``split_head`` reads a file's first frame where it holds ``bundle.json`` alone
(a version-5 bundle's header). Standard library and zstandard only.
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import NamedTuple

import zstandard

from .errors import BundleFormatError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a bundle's first bytes (a zstd frame)
_HEAD = 18  # the magic and the longest frame header
_BLOCK = 512  # tar's


def frame_end(fd: int, declared: int, start: int = 0) -> int | None:
    """Where the zstd frame at offset ``start`` of file ``fd`` ends, from its block
    headers (RFC 8878, 3.1.1); None past a block per 4 KiB declared (no encoder
    writes such blocks: give up rather than walk them in Python)."""
    head = os.pread(fd, _HEAD, start)
    pos = start + zstandard.frame_header_size(head)
    for _ in range(declared // 4096 + 64):
        h = os.pread(fd, 3, pos)
        if len(h) < 3:
            return pos + 3
        v = int.from_bytes(h, "little")  # bit 0: last block; bits 1-2: type (1: RLE, one byte); bits 3-23: size
        pos += 3 + (1 if (v >> 1) & 3 == 1 else v >> 3)
        if v & 1:
            return pos + 4 * zstandard.get_frame_parameters(head).has_checksum
    return None


def read_frame(fd: int, start: int, zsize: int, usize: int, path: str, what: str) -> bytes:
    """The decompressed bytes of the frame of ``zsize`` bytes at ``start``, which must
    declare ``usize`` bytes, hold one frame exactly, and match its checksum."""
    data = os.pread(fd, zsize, start)
    if len(data) < zsize:
        raise BundleFormatError(f"{path} is truncated: {what} ends past the end of the file")
    try:
        declared = zstandard.frame_content_size(data[:_HEAD])
        d = zstandard.ZstdDecompressor().decompressobj()
        out = d.decompress(data)
    except zstandard.ZstdError as e:
        raise BundleFormatError(f"{path} is corrupt: {what}: {e}") from None
    if declared != usize or len(out) != usize or not d.eof or d.unused_data:
        raise BundleFormatError(f"{path} is corrupt: {what} is not the frame of {usize} bytes its index names")
    return out


def check_member_name(name: str, path: str) -> None:
    bad = ""
    if not name or name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        bad = "an absolute or non-POSIX path"
    elif any(part in ("..", ".", "") for part in name.split("/")):
        bad = "a path with '..', '.' or an empty component"
    if bad:
        raise BundleFormatError(f"{path}: member {name!r} has {bad}; refusing the bundle")


def is_tar_end(chunk: bytes) -> bool:
    """A tar's end: zero blocks only (two at least)."""
    return len(chunk) >= 2 * _BLOCK and len(chunk) % _BLOCK == 0 and not chunk.strip(b"\0")


def members_of(chunk: bytes, path: str, what: str) -> list[tuple[str, bytes, int]]:
    """(name, data, where its header starts) of each regular member the tar bytes ``chunk``
    (a frame's) hold, in order, names checked, nothing after the last one but its padding."""
    out: list[tuple[str, bytes, int]] = []
    end = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(chunk), mode="r|") as tf:
            for ti in tf:
                check_member_name(ti.name, path)
                if not ti.isreg():
                    raise BundleFormatError(f"{path}: member {ti.name!r} is a link, a device or a special file; "
                                            "refusing the bundle")
                end = ti.offset_data + ti.size
                out.append((ti.name, chunk[ti.offset_data:end], ti.offset))
                end += -ti.size % _BLOCK
    except tarfile.TarError as e:
        raise BundleFormatError(f"{path} is corrupt: {what}: bad tar data ({e})") from None
    if not out or end != len(chunk):
        raise BundleFormatError(f"{path} is corrupt: {what} does not hold whole tar members")
    return out


def one_member(chunk: bytes, path: str, what: str) -> tuple[str, bytes]:
    """(name, data) of the one member the tar bytes ``chunk`` (a frame's) hold."""
    found = members_of(chunk, path, what)
    if len(found) != 1:
        raise BundleFormatError(f"{path} is corrupt: {what} holds {len(found)} members, not one")
    return found[0][0], found[0][1]


def member_at(chunk: bytes, at: int, path: str, what: str) -> tuple[str, bytes]:
    """(name, data) of the member whose tar header starts at ``at`` in ``chunk`` (a frame's
    decompressed bytes), wholly inside it."""
    try:
        with tarfile.open(fileobj=io.BytesIO(chunk[at:]), mode="r|") as tf:
            ti = tf.next()
            if ti is None or not ti.isreg():
                raise BundleFormatError(f"{path} is corrupt: {what}: no regular member at byte {at} of its frame")
            end = ti.offset_data + ti.size
    except tarfile.TarError as e:
        raise BundleFormatError(f"{path} is corrupt: {what}: bad tar data ({e})") from None
    if at + end > len(chunk):
        raise BundleFormatError(f"{path} is corrupt: {what} runs past the end of its frame")
    return ti.name, chunk[at + ti.offset_data:at + end]


class Head(NamedTuple):
    """A file's first frame where it holds ``bundle.json`` alone: its bytes, where the frame
    ends in the file, and its decompressed size."""

    data: bytes
    end: int
    usize: int


def split_head(fd: int, path: str, index_name: str) -> Head | None:
    """The first frame of file ``fd`` where it holds member ``index_name`` alone (a
    version-5 bundle's header); None where it holds more (an older bundle: one frame
    for the whole tar) or declares no size. Reads that frame's first tar block only
    to tell. Raises ``BundleFormatError`` for a file that is not zstd."""
    head = os.pread(fd, _HEAD, 0)
    if len(head) < 4 or head[:4] != ZSTD_MAGIC:
        raise BundleFormatError(f"{path} is not a boo bundle: not a zstd file")
    try:
        declared = zstandard.frame_content_size(head)
        if declared < 0:
            return None
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(os.pread(fd, 1 << 16, 0)))
        block = reader.read(_BLOCK)
    except zstandard.ZstdError:
        return None  # the whole-file reader says what is wrong
    try:
        ti = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.TarError:
        return None
    if ti.name != index_name or not ti.isreg() or declared != _BLOCK + ti.size + (-ti.size % _BLOCK):
        return None
    end = frame_end(fd, declared)
    if end is None:
        return None
    name, data = one_member(read_frame(fd, 0, end, declared, path, f"the first frame ({index_name})"), path,
                            index_name)
    return Head(data, end, declared)


__all__ = ["Head", "ZSTD_MAGIC", "check_member_name", "frame_end", "is_tar_end", "member_at", "members_of",
           "one_member", "read_frame", "split_head"]
