"""Kernel receive timestamps for UDP sockets (Linux ``SO_TIMESTAMPNS``).

Theory of operation: with ``SO_TIMESTAMPNS`` set, every datagram read with ``recvmsg`` carries
the CLOCK_REALTIME time the kernel received it, as a ``struct timespec`` in an ``SCM_TIMESTAMPNS``
control message.  An event loop that is busy reads the datagram later, but its receive time
stays the kernel's; :func:`loop_time` maps it onto the loop's monotonic clock.
"""

from __future__ import annotations

import socket
import struct
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
TIMESPEC = struct.Struct("@qq")
ANCILLARY_BYTES = 64


def enable(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def kernel_time(ancillary: list) -> float | None:
    """Epoch seconds of the kernel's receive time in ``recvmsg``'s ancillary data, if any."""
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
            sec, nsec = TIMESPEC.unpack(payload[:TIMESPEC.size])
            return sec + nsec * 1e-9
    return None


def loop_time(kernel_s: float | None, loop_now: float) -> tuple[float, float]:
    """(receive time on the loop's clock, how long ago that was in s); without a kernel time
    (or one from the future: a clock step), now and 0."""
    wall = time.time()
    if kernel_s is None or kernel_s > wall:
        return loop_now, 0.0
    lag = wall - kernel_s
    return loop_now - lag, lag
