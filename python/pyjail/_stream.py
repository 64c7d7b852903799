"""Streaming output to callbacks (Session.run's and run()'s ``on_stdout`` and
``on_stderr``) as the jail's program writes it, within the same caps as the
captured output."""

from __future__ import annotations

import codecs
from typing import Any, Callable, Optional

from ._channel import ProtocolError

__all__ = ["OutputCallback", "Streams"]

OutputCallback = Callable[[str], Any]


class Streams:
    """Output callbacks of one cell or run: the text of each chunk, decoded as
    UTF-8 across chunk boundaries, to its stream's callback, at most ``limit``
    bytes per stream. Past that, a ``strict`` caller (a Session, whose jail
    sends no more than that) has the jail break the protocol; others (run(),
    whose program may write more) pass on no more. The first exception of a
    callback stops the calls; finish() raises it."""

    def __init__(self, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
                 limit: int, strict: bool = True) -> None:
        self.strict = strict
        self.callbacks = {1: on_stdout, 2: on_stderr}
        self.room = {1: limit, 2: limit}
        self.decoders = {n: codecs.getincrementaldecoder("utf-8")("replace") for n in (1, 2)}
        self.error: Optional[BaseException] = None

    def add(self, stream: Any, data: bytes) -> None:
        if stream not in (1, 2) or type(stream) is not int:
            raise ProtocolError("an output frame of stream %r" % (str(stream)[:20],))
        room = self.room[stream]
        if len(data) > room:
            if self.strict:
                raise ProtocolError("a cell's streamed output over max_output")
            data = data[:room]
        self.room[stream] = room - len(data)
        self._call(stream, self.decoders[stream].decode(data))

    def _call(self, stream: int, text: str) -> None:
        fn = self.callbacks[stream]
        if fn is None or not text or self.error is not None:
            return
        try:
            fn(text)
        except BaseException as e:   # raised by finish(), once the cell has ended
            self.error = e

    def finish(self) -> None:
        """The last characters (an incomplete UTF-8 sequence), then the
        callbacks' error, if any."""
        for n in (1, 2):
            self._call(n, self.decoders[n].decode(b"", final=True))
        if self.error is not None:
            raise self.error
