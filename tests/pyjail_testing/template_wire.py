"""What passes between a `pyjail --via` client and `pyjail serve`, for tests that play one side
of it themselves: the server's hello (template_protocol.hpp's ServeHello), the reply kinds, and
the request a real client sends, captured."""

from __future__ import annotations

import os
import socket
import struct
import threading

from pyjail_testing.runs import describe

# ServeHello: version, cgroup_ok, rootfs, why_not, refused.
HELLO = "<II1024s512s256s"
HELLO_SIZE = struct.calcsize(HELLO)
SERVE_VERSION = 4
REFUSED = 3  # TemplateReply's kind for a refused request


def capture_request(run_jail, user, rootfs, world_tmp, code: str = "pass",
                    opts: tuple[str, ...] = ()) -> tuple[bytes, int]:
    """The request `pyjail OPTS --via SOCK -- python -c CODE` sends, as `user`, and how many
    descriptors came with it: received by a listener of this test process (root's, or the
    user's own) that answers as pyjail serve would."""
    d = world_tmp.dir(0o777)
    path = str(d / "capture.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(path)
    os.chmod(path, 0o777)
    s.listen(1)
    got = {"fds": 0}

    def serve_once():
        c, _ = s.accept()
        c.send(struct.pack(HELLO, SERVE_VERSION, 0, os.path.realpath(rootfs).encode(), b"", b""))
        data, anc, _, _ = c.recvmsg(1 << 20, socket.CMSG_SPACE(16 * 4))
        for _, _, payload in anc:
            got["fds"] = len(payload) // 4
            for fd in struct.unpack(f"{len(payload) // 4}i", payload[:len(payload) // 4 * 4]):
                os.close(fd)
        got["request"] = data
        c.close()

    t = threading.Thread(target=serve_once)
    t.start()
    r = run_jail(["--quiet", *opts, "--via", path, "--", "python", "-c", code], user=user, timeout=60)
    t.join(30)
    s.close()
    assert "request" in got, describe(r)
    return got["request"], got["fds"]
