"""What ``open_bundle`` reads of a bundle file, and when.

A format-5 bundle (``split_format.py``) is read a part at a time
(``SplitBundleFile``): opening reads the header (the first zstd frame) and
checks the file's extent; the bundle's target's routes are read when a
``Bundle`` is made for it (their sha256 checked against the header); a
module when its kernel first loads (its frame, its tar name and size; its
sha256 is checked before it loads, ``Bundle._runner``); the records only when
asked (``Bundle.info()``, ``Bundle.index``). An older bundle is read whole, as
before (``WholeBundleFile``: ``archive.read_archive``), and answers the same
questions from its index. Standard library and zstandard only.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from typing import Any, Mapping

from .archive import Archive, BundleTooLarge, check_extent, load_json, read_archive, split_header
from .errors import BundleFormatError
from .format import INDEX_NAME, BundleIndex, check_index
from .frames import Head, member_at, read_frame, split_head
from .split_format import BundleHeader, Frame, Part, check_routes, route_json

_HASH_CHUNK = 1 << 20


class WholeBundleFile:
    """A bundle of format 1-4 (or any ``Archive``), read whole at open."""

    def __init__(self, archive: Archive):
        self.archive = archive
        self.path = archive.path
        self.header = BundleHeader.of_index(archive.bundle_index)

    def routes(self, target: str) -> Mapping[str, Any]:
        """``target``'s routes (``split_format.route_json``), from the index."""
        return route_json(self.archive.bundle_index, target)["kernels"]

    def module(self, member: str, frame: Frame | None, size: int) -> bytes:
        return self.archive.members[member]

    def records(self) -> tuple[dict[str, Any], BundleIndex]:
        return self.archive.index, self.archive.bundle_index

    def file_sha256(self) -> str:
        return self.archive.file_sha256()


class SplitBundleFile:
    """A format-5 bundle, read a part at a time from the file opened (its
    descriptor is kept: a file replaced since is not read)."""

    def __init__(self, path: str, fd: int, head: Head, header: BundleHeader):
        self.path, self._fd, self._head, self.header = path, fd, head, header
        self._records: tuple[dict[str, Any], BundleIndex] | None = None
        self._lock = threading.Lock()
        weakref.finalize(self, os.close, fd)

    def _part(self, part: Part) -> bytes:
        """A member the header names, checked against its sha256 and size."""
        data = self.module(part.member, part.frame, part.size)
        if hashlib.sha256(data).hexdigest() != part.sha256:
            raise BundleFormatError(f"{self.path}: member {part.member} is corrupt: its sha256 is not the "
                                    "header's; rebuild or re-download the bundle")
        return data

    def routes(self, target: str) -> Mapping[str, Any]:
        part = self.header.routes[target]
        return check_routes(load_json(self._part(part), self.path, part.member), target,
                            f"{self.path}: {part.member}")

    def module(self, member: str, frame: Frame | None, size: int) -> bytes:
        """Member ``member`` (``size`` bytes) from its frame (decompressed whole: a
        module may share it with others of its target): the frame's checksum, the tar
        member's name and size (not its sha256: the caller's)."""
        if frame is None:
            raise BundleFormatError(f"{self.path}: member {member} has no frame in the index")
        what = f"member {member}"
        name, data = member_at(read_frame(self._fd, self._head.end + frame.offset, frame.zsize, frame.usize,
                                          self.path, what), frame.at, self.path, what)
        if name != member or len(data) != size:
            raise BundleFormatError(f"{self.path}: the frame of {member} holds {name!r} of {len(data)} bytes, "
                                    f"not {size}")
        return data

    def records(self) -> tuple[dict[str, Any], BundleIndex]:
        """The records (``records.json``: the whole index), read at the first call."""
        with self._lock:
            if self._records is None:
                part = self.header.records
                assert part is not None  # a format-5 header
                index = load_json(self._part(part), self.path, part.member)
                typed = check_index(index, None, self.path, part.member)
                problem = self.header.disagreement(typed)
                if problem:
                    raise BundleFormatError(f"{self.path}: {problem}")
                self._records = index, typed
        return self._records

    def file_sha256(self) -> str:
        h, pos = hashlib.sha256(), 0
        while block := os.pread(self._fd, _HASH_CHUNK, pos):
            h.update(block)
            pos += len(block)
        return h.hexdigest()


BundleFile = WholeBundleFile | SplitBundleFile


def open_bundle_file(path: str | os.PathLike, max_size: int) -> BundleFile:
    """A bundle file for ``open_bundle``: a format-5 one's header read (its
    extent and decompressed size checked), an older one read whole."""
    path_s = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise BundleFormatError(f"cannot read bundle {path_s}: {e.strerror or e}") from None
    try:
        size = os.fstat(fd).st_size
        if size > max_size:
            raise BundleTooLarge(f"{path_s} is {size} bytes, over the limit of {max_size}", max_size, "")
        head = split_head(fd, path_s, INDEX_NAME)
        header = None if head is None else split_header(head, path_s)
        if head is not None and header is not None:
            check_extent(header, head, size, path_s, max_size)
            return SplitBundleFile(path_s, fd, head, header)
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return WholeBundleFile(read_archive(path_s, max_size=max_size))


__all__ = ["BundleFile", "SplitBundleFile", "WholeBundleFile", "open_bundle_file"]
