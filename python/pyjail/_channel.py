"""The driver's end of the framed channel to the in-jail server, and how the
server is started."""

from __future__ import annotations

import errno
import hashlib
import os
import select
import time
from typing import Any, Dict, List, Optional, Tuple

from . import _server
from ._common import PyjailError

Frame = Tuple[Dict[str, Any], bytes]

_SOURCE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_server.py")
with open(_SOURCE_PATH, "rb") as _f:
    SERVER_SOURCE = _f.read()
SERVER_SHA256 = hashlib.sha256(SERVER_SOURCE).hexdigest()

# The jail's program: `python -I -c BOOT SHA256`. It runs the rootfs's copy of
# the server when that is byte for byte the driver's own, and otherwise asks
# the driver for the source, so a driver never talks to a server of another
# version (an older rootfs, a --rootfs built elsewhere).
BOOT = r"""
import sys
def _boot(want):
    import os, struct
    path = "/usr/lib/pyjail/pyjail_server.py"
    try:
        import hashlib
        with open(path, "rb") as f:
            have = hashlib.sha256(f.read()).hexdigest()
    except (OSError, ImportError):
        have = None
    if have == want:
        sys.path.insert(0, "/usr/lib/pyjail")
        try:
            import pyjail_server as m
        finally:
            del sys.path[0]
    else:
        head = b'{"op":"need-source"}'
        os.write(1, struct.pack(">4sII", b"PJF1", len(head), 0) + head)
        def read(n):
            b = b""
            while len(b) < n:
                c = os.read(0, n - len(b))
                if not c:
                    raise SystemExit(3)
                b += c
            return b
        magic, hlen, blen = struct.unpack(">4sII", read(12))
        read(hlen)
        src = read(blen)
        import types
        m = types.ModuleType("pyjail_server")
        m.__file__ = path
        m.FROM_DRIVER = True
        sys.modules["pyjail_server"] = m
        exec(compile(src, path, "exec"), m.__dict__)
    m.main()
_boot(sys.argv[1])
"""


def server_command() -> List[str]:
    """The command (after pyjail's `--`) that starts the in-jail server."""
    return ["python", "-I", "-c", BOOT, _SERVER_SHA256_IN_USE[0]]


# The hash the driver asks for (tests replace it to force the fallback).
_SERVER_SHA256_IN_USE = [SERVER_SHA256]


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
    is allocated for it (its header at most _server.HEADER_FROM_JAIL bytes,
    its body at most ``max_body``), and its header must be a JSON object
    (see _server.decode_header_from_jail). Host memory for one frame stays
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
        self._spinner = _server.Spinner(rfd)

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
        view = memoryview(_server.encode_frame(header, body))
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
            frame = _server.parse_frame(self.buf, self.max_body, _server.HEADER_FROM_JAIL)
        except ValueError as e:
            raise ProtocolError(str(e))
        if frame is None:
            return None
        head, body = frame
        try:
            return _server.decode_header_from_jail(head), body
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
                # first (see _server.SPIN_S).
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

    def handshake(self, deadline: Optional[float]) -> Dict[str, Any]:
        """Wait for the server's hello, sending it its source if it asks."""
        header, _ = self.recv(deadline)
        if header.get("op") == "need-source":
            self.send({"op": "source"}, SERVER_SOURCE, deadline)
            header, _ = self.recv(deadline)
        if header.get("op") == "refused":
            raise ServerRefused(str(header.get("error"))[:4096])
        if header.get("op") != "hello":
            raise ProtocolError("expected the server's hello, got %r" % header.get("op"))
        if header.get("protocol") != _server.PROTOCOL:
            raise ProtocolError("the jail speaks protocol %r, this driver %d"
                                % (header.get("protocol"), _server.PROTOCOL))
        return header
