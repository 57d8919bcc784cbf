"""A gzip file read as its decompressed bytes, with seeks, in bounded memory and no temporary file.

Theory of operation: the cutter of JSON documents (:mod:`quicack.qlog.document`) reads a file
forward in windows, and seeks back a little (to a cut it found) or, a few times per document,
far back (to the events array's start after reading the tail).  :class:`GzipWindow` serves that
from the compressed file alone: it decompresses forward as asked, keeps the last ``keep`` bytes
in memory (a backward seek within them costs nothing), and every ``every`` bytes keeps a copy of
the decompressor's state (``zlib.Decompress.copy``, a few tens of KB): a seek further back
restarts from the nearest such checkpoint, so it costs at most ``every`` bytes of decompression,
never a pass from the start.  Multi-member files read as their members one after the other.
A stream that ends early (a writer killed mid-file) or holds bad data ends where it could be
read, and :attr:`GzipWindow.error` says why; nothing ever holds the whole document.
"""

from __future__ import annotations

import io
import os
import zlib

#: compressed bytes fed to the decompressor at a time: one step decompresses to at most ~1000×
#: that (deflate's largest ratio), so a gzip bomb never makes a step large
STEP_BYTES = 16 << 10


class GzipWindow(io.RawIOBase):
    """The decompressed bytes of the gzip file ``path``: ``read``, ``seek``, ``tell``, ``size``."""

    def __init__(self, path: str | os.PathLike, keep: int = 24 << 20, every: int = 16 << 20,
                 share: GzipWindow | None = None):
        """``share``: another reader of the same file, whose checkpoints and size this one takes
        (and adds to): reading the file again then never starts from its beginning."""
        super().__init__()
        self._raw = open(path, "rb")
        self._keep = keep
        self._every = every if share is None else share._every
        self._pos = 0
        #: (decompressed offset, compressed offset, decompressor) at a step's end, every ``every`` bytes
        self._checkpoints: list[tuple[int, int, object]] = [] if share is None else share._checkpoints
        self._size: int | None = None if share is None else share._size
        self.error: Exception | None = None if share is None else share.error
        self._restart(0, 0, zlib.decompressobj(31))

    def _restart(self, at: int, raw_at: int, decompressor) -> None:
        self._raw.seek(raw_at)
        self._d = decompressor
        self._buf = bytearray()
        self._start = at  # decompressed offset of _buf[0]
        self._done = False

    @property
    def _end(self) -> int:
        return self._start + len(self._buf)

    def _step(self) -> bool:
        """Decompress one step more; False at the end of the stream."""
        if self._done:
            return False
        chunk = self._raw.read(STEP_BYTES)
        try:
            out = self._d.decompress(chunk) if chunk else self._d.flush()
            while self._d.eof and self._d.unused_data.strip(b"\0"):  # another member follows
                rest = self._d.unused_data
                self._d = zlib.decompressobj(31)
                out += self._d.decompress(rest)
        except zlib.error as e:
            self.error = OSError(f"bad gzip data: {e}")
            out, self._done = b"", True
        if not chunk:
            self._done = True
            if not self._d.eof and self.error is None:
                self.error = EOFError("Compressed file ended before the end-of-stream marker was reached")
        self._buf += out
        if self._end >= (len(self._checkpoints) + 1) * self._every and not self._done:
            self._checkpoints.append((self._end, self._raw.tell(), self._d.copy()))
        drop = min(self._pos, self._end - self._keep) - self._start
        if drop > 0:
            del self._buf[:drop]
            self._start += drop
        return bool(out) or not self._done

    def _reach(self, pos: int) -> None:
        """Make ``pos`` the start of what is held, or as near as the stream allows."""
        if pos < self._start:
            at, raw_at, d = max((c for c in self._checkpoints if c[0] <= pos), key=lambda c: c[0],
                                default=(0, 0, None))
            self._restart(at, raw_at, d.copy() if d is not None else zlib.decompressobj(31))
        while self._end < pos and self._step():
            pass

    def read(self, n: int = -1) -> bytes:
        self._reach(self._pos)
        if n is None or n < 0:
            while self._step():
                pass
            n = self._end - self._pos
        while self._end < self._pos + n and self._step():
            pass
        lo = self._pos - self._start
        data = bytes(self._buf[lo:lo + n]) if lo >= 0 else b""
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == os.SEEK_END:
            pos += self.size()
        elif whence == os.SEEK_CUR:
            pos += self._pos
        self._pos = max(0, pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        """The decompressed size (decompressed to the end once, the first time)."""
        if self._size is None:
            here = self._pos
            self._pos = self._end
            while self._step():
                self._pos = self._end - min(len(self._buf), self._keep)
            self._size = self._end
            self._pos = here
        return self._size

    def close(self) -> None:
        self._raw.close()
        super().close()
