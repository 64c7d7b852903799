"""The driver's end of the framed channel to the in-jail server (see _wire's
protocol description): frames sent and received with deadlines, every frame
from the jail checked by _wire.decode_header_from_jail."""

from __future__ import annotations

import errno
import os
import select
import time
from typing import Any, Dict, Optional, Tuple

from . import _wire
from ._common import PyjailError

Frame = Tuple[Dict[str, Any], bytes]


class ChannelError(PyjailError):
    pass


class ChannelClosed(ChannelError):
    """The jail's end is gone (the interpreter died, or the jail ended)."""


class ChannelTimeout(ChannelError):
    pass


class ProtocolError(ChannelError):
    """The jail broke the protocol: a malformed frame, one it had no reason to
    send, or a name, size or count that the driver does not accept."""


class ServerRefused(ChannelError):
    """The in-jail server refused to start (it could not make itself safe)."""


class Channel:
    """Frames over the jail's stdin (wfd) and stdout (rfd), with deadlines.

    Everything read is hostile: a frame's sizes are checked before anything
    is allocated for it (its header at most _wire.HEADER_FROM_JAIL bytes,
    its body at most ``max_body``), and its header must be a well-formed frame
    of the jail's (see _wire.decode_header_from_jail: a JSON object, an
    operation of _wire.OPS with its fields). Host memory for one frame stays
    within a few times its size."""

    def __init__(self, wfd: int, rfd: int, max_body: int) -> None:
        self.wfd, self.rfd = wfd, rfd
        self.max_body = max_body
        self.buf = bytearray()
        self.closed = False
        os.set_blocking(wfd, False)
        os.set_blocking(rfd, False)
        self._writable = select.poll()
        self._writable.register(wfd, select.POLLOUT)
        # Its poller (rfd, POLLIN) is also what recv sleeps on.
        self._spinner = _wire.Spinner(rfd)

    @staticmethod
    def _wait(poller: "select.poll", deadline: Optional[float]) -> None:
        """Wait until the poller's descriptor is ready: ChannelTimeout once the
        deadline has passed, unless it is ready even then."""
        while True:
            if deadline is None:
                timeout_ms = None
            else:
                left = deadline - time.monotonic()
                timeout_ms = max(0, int(left * 1000 + 0.999))
            if poller.poll(timeout_ms):
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise ChannelTimeout("timed out")

    def send(self, header: Dict[str, Any], body: bytes = b"",
             deadline: Optional[float] = None) -> None:
        if self.closed:
            raise ChannelClosed("the channel is closed")
        view = memoryview(_wire.encode_frame(header, body))
        while view:
            try:
                n = os.write(self.wfd, view)
            except BlockingIOError:
                self._wait(self._writable, deadline)
                continue
            except OSError as e:
                if e.errno in (errno.EPIPE, errno.EBADF, errno.ECONNRESET):
                    self.closed = True
                    raise ChannelClosed("the jail's end of the channel is closed")
                raise
            view = view[n:]

    def _parse(self) -> Optional[Frame]:
        try:
            frame = _wire.parse_frame(self.buf, self.max_body, _wire.HEADER_FROM_JAIL)
        except ValueError as e:
            raise ProtocolError(str(e))
        if frame is None:
            return None
        head, body = frame
        try:
            return _wire.decode_header_from_jail(head), body
        except ValueError as e:
            raise ProtocolError("bad frame header: %s" % str(e)[:200])

    def recv(self, deadline: Optional[float] = None) -> Frame:
        """The next frame. Once ``deadline`` has passed, what is already in
        the pipe is looked at once more (an answer that came just as time ran
        out is taken), then ChannelTimeout. A jail that floods the channel
        with frames keeps it readable for ever: callers that loop over frames
        check their own deadline after each one (see Session._exec)."""
        more = False
        looked_late = False
        while True:
            frame = self._parse()
            if frame is not None:
                return frame
            if self.closed:
                raise ChannelClosed("the jail closed the channel")
            if not more and deadline is not None and time.monotonic() >= deadline:
                # Past the deadline, the pipe is read until it is empty once,
                # then no more: a jail that drips a frame's pieces cannot hold
                # the caller (and one that floods sends whole frames, which
                # end this call, capped in size).
                if looked_late:
                    raise ChannelTimeout("timed out")
                looked_late = True
            if not more and not self._spinner.spin(deadline):
                # A reply is seldom there yet: wait first rather than pay for
                # a read that fails (the pipe is non-blocking), and spin
                # first (see _wire.SPIN_S).
                self._wait(self._spinner.poller, deadline)
            try:
                # A pipe holds 64 KiB: asking for more only costs a larger
                # allocation (1 MiB: an mmap, several µs, every time).
                data = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                more = False
                continue
            # A frame larger than the pipe comes in pieces: read on until
            # one finds nothing.
            more = True
            if not data:
                self.closed = True
                if self.buf:
                    raise ChannelClosed("the jail closed the channel in the middle of a frame")
                raise ChannelClosed("the jail closed the channel")
            self.buf += data
