"""A stand-in for the pyjail binary that plays a jail taken over by its program:
it speaks the driver's protocol on stdin and stdout like the in-jail server, but
answers with forged frames. The driver runs it as it would run pyjail
(`hostile_jail.py --quiet --report-fd N ... -- python -I -c BOOT SHA256`); the
attack is named by $HOSTILE_ATTACK. This feeds the driver exactly the frames a
program that reached the channel could send (see test_hostile_jail.py), now
that the real server no longer lets it reach the channel.
"""

import json
import os
import struct
import sys
import time

FRAME = struct.Struct(">4sII")
PROTOCOL = 1


def frame(header, body=b""):
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return FRAME.pack(b"PJF1", len(head), len(body)) + head + body


def send(data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(1, view)
        except BrokenPipeError:
            os._exit(0)
        view = view[n:]


def recv():
    """The driver's next (header, body); exits when the driver hangs up."""
    def read(n):
        out = b""
        while len(out) < n:
            chunk = os.read(0, n - len(out))
            if not chunk:
                os._exit(0)
            out += chunk
        return out
    _magic, hlen, blen = FRAME.unpack(read(FRAME.size))
    return json.loads(read(hlen)), read(blen)


def colliding_ints(n):
    # Multiples of 2**61-1 all hash to 0: a set of them costs n**2/2 comparisons to build.
    return [{"$i": str(k * (2 ** 61 - 1))} for k in range(1, n + 1)]


def detonator_pickle():
    """A pickle whose loading creates $HOSTILE_MARKER: what a jail would send to run code
    on the host, if the host ever unpickled what it gets."""
    import base64
    import pickle

    class Detonator:
        def __reduce__(self):
            return (open, (os.environ["HOSTILE_MARKER"], "w"))
    return base64.b64encode(pickle.dumps(Detonator())).decode()


def flood(one):
    """Small frames from three processes, faster than the driver can take them: the
    channel never falls silent."""
    for _ in range(2):
        if os.fork() == 0:
            break
    many = one * (4096 // len(one))
    while True:
        send(many)


def run_program(attack):
    """pyjail.run(files=...): take the puts, then answer the spawn with a forged exit."""
    while True:
        header, _ = recv()
        if header["op"] == "put":
            send(frame({"op": "ok", "id": header["id"], "size": 0, "mtime_ns": 0}))
        elif header["op"] == "spawn":
            break
    rid = header["id"]
    if attack == "host-paths":
        send(frame({"op": "exited", "id": rid, "status": 0,
                    "files": [["../../../root/.ssh/authorized_keys", 4], ["/etc/cron.d/x", 4]],
                    "skipped": []}, b"ssh-cron"))
    elif attack == "negative-sizes":
        # Sizes -1, 1, -1, 1, ...: each body[0:-1] copied (nearly) the whole body again.
        body = b"x" * (int(os.environ.get("HOSTILE_BODY", str(8 << 20))))
        send(frame({"op": "exited", "id": rid, "status": 0, "skipped": [],
                    "files": [["f%d" % i, 1 if i % 2 else -1] for i in range(40)]}, body))
    elif attack == "over-caps":
        # Files the outputs= patterns and caps exclude.
        send(frame({"op": "exited", "id": rid, "status": 0,
                    "files": [["secret.key", 1]] + [["f%d.txt" % i, 0] for i in range(500)],
                    "skipped": []}, b"k"))
    elif attack == "huge-header":
        send(frame(b"[" + b",".join([b"{}"] * (5 << 20)) + b"]"))
    elif attack == "error-surrogate":
        # An error whose text holds a lone surrogate (JSON's \ud800): no UTF-8 for it.
        send(frame({"op": "error", "id": rid, "error": "cannot start \ud800"}))
    os._exit(0)     # as the server does once the program has exited


PNG = b"\x89PNG\r\n\x1a\n"
# attack: ([(of this cell?, body) of output frames], [(MIME type, bytes[, size said]) of images])
RESULT_ATTACKS = {
    "image-ok": ([], [("image/png", PNG)]),
    "image-mime": ([], [("text/html", b"<script>")]),
    "image-count": ([], [("image/png", PNG)] * 33),
    "image-sizes": ([], [("image/png", PNG, 100)]),     # a size past the body's end
    "image-over-cap": ([], [("image/png", PNG * (300 << 10))]),
    "output-ok": ([(True, b"ab\xc3"), (True, b"\xa9")], []),
    "output-over-cap": ([(True, b"x" * 800), (True, b"y" * 800)], []),
    "output-other-id": ([(False, b"x")], []),
}


def session(attack):
    """A Session: answer requests until the attack's request comes."""
    while True:
        header, _ = recv()
        op, rid = header["op"], header.get("id")
        if op == "ping" and attack != "flood-ping":
            send(frame({"op": "pong", "id": rid}))
            continue
        if op == "bye":
            os._exit(0)
        if attack == "huge-header":
            # Under the old 16 MiB cap: 5 million empty objects.
            send(frame(b"[" + b",".join([b"{}"] * (5 << 20)) + b"]"))
        elif attack == "max-header":
            # Just under the driver's cap: ~350,000 empty objects, the costliest JSON per byte.
            n = (1 << 20) // 3 - 20
            send(frame(b'{"op": "x", "a": [' + b",".join([b"{}"] * n) + b"]}"))
        elif attack == "colliding-set":
            send(frame({"op": "result", "id": rid, "error": None, "value": "{...}",
                        "data": {"$s": colliding_ints(25000)},
                        "stdout": [0, 0, 0], "stderr": [0, 0, 0]}))
        elif attack == "deep-header":
            send(frame(b"[" * 500000 + b"]" * 500000))
        elif attack == "huge-int":
            send(frame(b'{"op": "result", "id": "%s", "killed": %s}'
                       % (rid.encode(), b"9" * 500000)))
        elif attack == "host-paths":
            send(frame({"op": "ok", "id": rid, "entries": [["../../etc/passwd", 1],
                                                            ["/etc/shadow", 1]]}))
        elif attack == "negative-size":
            send(frame({"op": "ok", "id": rid, "entries": [["a", -5]], "size": -5}))
        elif attack == "big-download":
            send(frame({"op": "file", "id": rid}, b"x" * int(os.environ["HOSTILE_BODY"])))
        elif attack == "pickle-result":
            send(frame({"op": "result", "id": rid, "error": None, "value": "'x'",
                        "data": {"$p": detonator_pickle(), "$r": "x"},
                        "stdout": [0, 0, 0], "stderr": [0, 0, 0]}))
            continue
        elif attack == "pickle-call":
            send(frame({"op": "call", "id": "c1", "name": "record",
                        "args": [{"$p": detonator_pickle(), "$r": "x"}], "kwargs": {"$d": []}}))
            reply, _ = recv()
            # The cell's value: what the host answered the call with.
            send(frame({"op": "result", "id": rid, "error": None,
                        "value": json.dumps(reply), "stdout": [0, 0, 0], "stderr": [0, 0, 0]}))
            continue
        elif attack in ("displays-count", "displays-entry", "formats-forged"):
            # A cell's rich formats, forged (see test_values).
            header = {"op": "result", "id": rid, "error": None, "value": "v",
                      "stdout": [0, 0, 0], "stderr": [0, 0, 0]}
            if attack == "displays-count":
                header["displays"] = [{"text/plain": "x"}] * 9
            elif attack == "displays-entry":
                header["displays"] = [{"text/html": "<b>no repr</b>"}]
            else:
                header["formats"] = {"text/html": 5, "image/png": "x", "text/latex": "$x$",
                                     "application/json": {"a": [1]}}
                header["displays"] = [{"text/plain": "d", "text/markdown": ["not", "text"]}]
            send(frame(header))
            continue
        elif attack in RESULT_ATTACKS:
            # A cell's result or its streamed output, forged (see test_async_stream_rich).
            frames, images = RESULT_ATTACKS[attack]
            for stream, body in frames:
                send(frame({"op": "output", "id": rid if stream else "r999", "stream": 1},
                           body))
            entries = [[i[0], i[2] if len(i) > 2 else len(i[1])] for i in images]
            send(frame({"op": "result", "id": rid, "error": None, "value": None,
                        "stdout": [0, 0, 0], "stderr": [0, 0, 0], "images": entries},
                       b"".join(i[1] for i in images)))
            continue
        elif attack in ("flood", "flood-ping"):
            flood(frame({"op": "result", "id": "stray"}))
        elif attack == "flood-calls":
            flood(frame({"op": "call", "id": "c1", "name": "nothing", "args": [], "kwargs": {}}))
        else:
            raise SystemExit("unknown attack %r" % attack)
        time.sleep(600)


def main():
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # a jail that ignores the interrupt
    attack = os.environ["HOSTILE_ATTACK"]
    if attack == "refused":
        # What the real server says when it cannot make itself non-dumpable.
        send(frame({"op": "refused", "error": "the in-jail server cannot make itself "
                                              "non-dumpable (test)"}))
        os._exit(125)
    send(frame({"op": "hello", "protocol": PROTOCOL, "pid": os.getpid()}))
    if os.environ.get("HOSTILE_MODE") == "run":
        run_program(attack)
    else:
        session(attack)


if __name__ == "__main__":
    main()
