"""The protocol between the driver and the in-jail server (python/pyjail/_wire.py): the
table of operations, the checked decoder of the jail's frames, the boot built from the
same constants, and the plain-data codec, type by type and on malformed input. No
binary needed: these are pure functions (and one host interpreter that plays the boot)."""

import base64
import json
import math
import os
import pickle
import re
import subprocess
import sys
import time
from collections import OrderedDict, namedtuple

import pytest

from pyjail_testing import REPO

from pyjail import _launch, _server, _wire

pytestmark = pytest.mark.no_binary


# ------------------------------------------------------------------ the table

def frame_of(header, body=b""):
    buf = bytearray(_wire.encode_frame(header, body))
    head, got = _wire.parse_frame(buf, None, _wire.HEADER_FROM_JAIL)
    assert not buf
    return _wire.decode_header_from_jail(head), got


WELL_FORMED_FROM_JAIL = [
    {"op": "need-source"},
    {"op": "refused", "error": "no ctypes"},
    {"op": "hello", "protocol": 1, "pid": 2, "python": "3.11.2", "server": "rootfs"},
    {"op": "hello", "protocol": 1, "pid": 2},
    {"op": "pong", "id": "r1"},
    {"op": "result", "id": "r1", "error": None, "value": "42", "stdout": [0, 0, 0],
     "stderr": [1, 2, 3], "value_str": "42", "data": 42, "killed": 0,
     "ended_by": {"name": "f", "token": "f1"}},
    {"op": "result", "id": "r1", "error": None, "value": None, "stdout": [0, 0, 0],
     "stderr": [0, 0, 0], "images": [["image/png", 4]]},
    {"op": "error", "id": None, "error": "bad"},
    {"op": "error", "id": "r1", "error": "no such file", "errno": 2, "strerror": "No such file",
     "too_large": 5},
    {"op": "ok", "id": "r1", "size": 5, "mtime_ns": 1},
    {"op": "ok", "id": "r1", "entries": [["a", 1]], "truncated": False},
    {"op": "ok", "id": "r1", "failed": {}},
    {"op": "ok", "id": "r1", "killed": 3},
    {"op": "file", "id": "r1"},
    {"op": "call", "id": "c1", "name": "f", "args": [], "kwargs": {"$d": []}},
    {"op": "out", "stream": 2},
    {"op": "output", "id": "r1", "stream": 1},
    {"op": "exited", "id": "run", "status": -9, "files": [], "skipped": []},
]


@pytest.mark.parametrize("header", WELL_FORMED_FROM_JAIL, ids=lambda h: h["op"])
def test_every_frame_the_jail_may_send_passes_the_checked_decoder(header):
    assert frame_of(header, b"body") == (header, b"body")


@pytest.mark.parametrize("header,why", [
    ({"op": "exec", "id": "r1", "code": "1"}, "unknown operation 'exec'"),   # the driver's
    ({"op": "x"}, "unknown operation 'x'"),
    ({"op": 5}, "unknown operation '5'"),
    ({"id": "r1"}, "unknown operation 'None'"),
    ({"op": "pong"}, "without id"),
    ({"op": "pong", "id": 1}, "id is nat, not str"),
    ({"op": "pong", "id": "r" * 65}, "id of 65 characters"),
    ({"op": "pong", "id": "r1", "extra": 1}, "unknown field 'extra'"),
    ({"op": "ok", "id": "r1", "size": -1}, "size is int, not nat"),
    ({"op": "ok", "id": "r1", "size": True}, "size is bool, not nat"),
    ({"op": "ok", "id": "r1", "size": 1.0}, "size is float, not nat"),
    ({"op": "ok", "id": "r1", "truncated": 1}, "truncated is nat, not bool"),
    ({"op": "result", "id": "r1", "error": None, "value": 5, "stdout": [], "stderr": []},
     "value is nat, not str or null"),
    ({"op": "result", "id": "r1", "error": None, "value": None, "stdout": []}, "without stderr"),
    ({"op": "hello", "protocol": "1", "pid": 2}, "protocol is str, not int"),
    ({"op": "exited", "id": "run", "status": 0, "files": {}, "skipped": []},
     "files is dict, not list"),
    ({"op": "output", "stream": 1}, "without id"),
    ({"op": "output", "id": "r1", "stream": -1}, "stream is int, not nat"),
    ({"op": "output", "id": "r1", "stream": "1"}, "stream is str, not nat"),
    ({"op": "result", "id": "r1", "error": None, "value": None, "stdout": [], "stderr": [],
      "images": {}}, "images is dict, not list"),
])
def test_a_frame_outside_the_table_is_refused(header, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(")):
        frame_of(header)


def test_the_driver_turns_a_refused_frame_into_a_protocol_error():
    from pyjail import _channel
    r, w = os.pipe()
    r2, w2 = os.pipe()
    try:
        chan = _channel.Channel(w2, r, 1 << 20)
        os.write(w, _wire.encode_frame({"op": "pong", "id": "r1", "rogue": 1}))
        with pytest.raises(_channel.ProtocolError, match="unknown field 'rogue'"):
            chan.recv(None)
    finally:
        for fd in (r, w, r2, w2):
            os.close(fd)


def test_the_server_answers_every_request_of_the_table_and_nothing_else():
    requests = {name for name, op in _wire.OPS.items() if op.sender == _wire.DRIVER}
    # source is the boot's, bye ends the loop, reply goes to the caller of a host function.
    assert requests - {"source", "bye", "reply"} == set(_server.Server.HANDLED)
    for name in _server.Server.HANDLED:
        assert callable(getattr(_server.Server, "op_" + name)), name


def test_driver_frames_are_checked_by_the_server_too():
    with pytest.raises(ValueError, match="unknown operation 'result'"):
        _wire.check_header({"op": "result", "id": "r1"}, _wire.DRIVER)
    with pytest.raises(ValueError, match="path is nat"):
        _wire.check_header({"op": "put", "id": "p", "path": 5}, _wire.DRIVER)
    assert _wire.check_header({"op": "exec", "id": "r", "code": ""}, _wire.DRIVER).name == "exec"
    assert _wire.check_header({"op": "exec", "id": "r", "code": "", "stream": True,
                               "image_limit": 1 << 20}, _wire.DRIVER).name == "exec"
    with pytest.raises(ValueError, match="stream is nat, not bool"):
        _wire.check_header({"op": "exec", "id": "r", "code": "", "stream": 1}, _wire.DRIVER)
    with pytest.raises(ValueError, match="image_limit is int, not nat"):
        _wire.check_header({"op": "exec", "id": "r", "code": "", "image_limit": -1},
                           _wire.DRIVER)
    with pytest.raises(ValueError, match="unknown operation 'output'"):
        _wire.check_header({"op": "output", "id": "r", "stream": 1}, _wire.DRIVER)


# ------------------------------------------------------------------ the boot

def test_the_boot_is_built_from_the_protocol_constants():
    boot = _launch.BOOT
    assert repr(_wire.encode_frame({"op": "need-source"})) in boot
    assert repr(_wire.FRAME.format) in boot and repr(_wire.MAGIC) in boot
    assert repr(_wire.JAIL_DIR) in boot
    assert repr([m for m, _ in _wire.JAIL_MODULES]) in boot
    assert "@" not in boot.replace("\\x40", "")      # every placeholder filled in
    compile(boot, "<boot>", "exec")


def test_the_boot_loads_the_driver_sources_when_the_rootfs_has_none(tmp_path):
    # The boot in a host interpreter, its rootfs directory empty: it asks for the sources,
    # loads the modules the driver sends, and runs the server, which says hello (or, where
    # it cannot become non-dumpable, refused): either way the modules loaded and spoke.
    from pyjail import _channel
    boot = _launch.BOOT.replace(repr(_wire.JAIL_DIR), repr(str(tmp_path)))
    proc = subprocess.Popen([sys.executable, "-I", "-c", boot, _launch.SERVER_SHA256],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(tmp_path))
    try:
        chan = _channel.Channel(proc.stdin.fileno(), proc.stdout.fileno(), 1 << 20)
        header = _launch.handshake(chan, time.monotonic() + 60)
        assert header["server"] == "driver" and header["protocol"] == _wire.PROTOCOL
        chan.send({"op": "ping", "id": "r1"}, b"", time.monotonic() + 10)
        assert chan.recv(time.monotonic() + 10)[0] == {"op": "pong", "id": "r1"}
        chan.send({"op": "nonsense", "id": "r2"}, b"", time.monotonic() + 10)
        reply = chan.recv(time.monotonic() + 10)[0]
        assert reply["op"] == "error" and "unknown operation 'nonsense'" in reply["error"]
    except _channel.ServerRefused:
        pass     # a host where it cannot make itself non-dumpable: it loaded, and refused
    finally:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()


def test_the_boot_refuses_sources_of_other_modules(tmp_path):
    answer = _wire.encode_frame({"op": "source", "modules": [["evil", 4]]}, b"pass")
    boot = _launch.BOOT.replace(repr(_wire.JAIL_DIR), repr(str(tmp_path)))
    r = subprocess.run([sys.executable, "-I", "-c", boot, _launch.SERVER_SHA256],
                       input=answer, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 3, r.stderr


def test_the_hash_covers_every_jail_module():
    assert [m for m, _ in _launch.SOURCES] == [m for m, _ in _wire.JAIL_MODULES]
    for i in range(len(_launch.SOURCES)):
        changed = list(_launch.SOURCES)
        changed[i] = (changed[i][0], changed[i][1] + b"\n")
        assert _launch.sources_sha256(changed) != _launch.SERVER_SHA256
    for _module, filename in _wire.JAIL_MODULES:
        assert (REPO / "python" / "pyjail" / filename).is_file()


def test_a_template_preloads_the_session_server_the_boot_names():
    # The template's copy of the names (it imports nothing of the driver's package): where
    # they drifted apart, no session would ever find its server preloaded.
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "template_under_test", REPO / "jail" / "template" / "pyjail_template.py")
    template = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(template)
    assert template.SESSION_SERVER_DIR == _wire.JAIL_DIR
    assert list(template.SESSION_SERVER_MODULES) == [m for m, _ in _wire.JAIL_MODULES]
    assert "SESSION_SERVER_SHA256" in _launch.BOOT


# ------------------------------------------------------------------ the codec, type by type

Point = namedtuple("Point", "x y")


class Text(str):
    pass


@pytest.mark.parametrize("value", [
    None, True, False, 0, 1, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 63, -2 ** 63 - 1, 10 ** 100,
    0.0, -0.0, 1.5, 1e308, float("inf"), float("-inf"),
    "", "text", "é\u2603\U0001f600", "\udcff", "$i", "x" * 10000,
    b"", b"\x00\xff" * 100, bytearray(b"ba"),
    [], [1, [2, [3]]], (), (1,), (1, "a", (2,)),
    set(), {1, 2}, frozenset(), frozenset({"a", (1, 2)}),
    {}, {"a": 1}, {1: "a", (1, 2): [3], None: None, 1.5: b"x", frozenset({1}): set()},
    {"$i": "1"}, {"$d": []}, [{"$p": "x", "$r": "y"}],
], ids=repr)
def test_every_plain_type_crosses_as_itself(value):
    tree = _wire.encode_value(value)
    json.dumps(tree, allow_nan=False)       # strict JSON: no NaN or Infinity literals
    back = _wire.decode_value(json.loads(json.dumps(tree)), from_jail=True)
    expected = bytes(value) if isinstance(value, bytearray) else value
    assert back == expected and type(back) is type(expected)
    if isinstance(value, float) and value == 0:
        assert math.copysign(1, back) == math.copysign(1, value)


def test_nan_crosses_as_nan():
    back = _wire.decode_value(_wire.encode_value(float("nan")), from_jail=True)
    assert isinstance(back, float) and back != back


@pytest.mark.parametrize("value,expected", [
    (Text("t"), "t"), (Point(1, 2), (1, 2)), (OrderedDict(a=1), {"a": 1}), (True + 0, 1),
])
def test_subclasses_cross_as_their_plain_base_type(value, expected):
    back = _wire.decode_value(_wire.encode_value(value))
    assert back == expected and type(back) is type(expected)


@pytest.mark.parametrize("value,why", [
    (object(), "object is not plain data"),
    ([1, {2: print}], "builtin_function_or_method is not plain data"),
    ("x" * (_wire.DATA_LIMIT + 1), "larger than"),
    ([b"x" * 1000] * 5000, "larger than"),
])
def test_what_is_not_plain_data_is_refused(value, why):
    with pytest.raises(_wire.PlainDataError, match=why):
        _wire.encode_value(value)


def test_nesting_is_refused_past_its_bound():
    deep = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(_wire.PlainDataError, match="deeply"):
        _wire.encode_value(deep)
    ok = []
    for _ in range(90):
        ok = [ok]
    assert _wire.decode_value(_wire.encode_value(ok), from_jail=True) == ok


# ------------------------------------------------------------------ malformed input

@pytest.mark.parametrize("tree", [
    {}, {"a": 1}, {"$x": 1}, {"$i": 1}, {"$i": "abc"}, {"$i": "1", "$r": "x"},
    {"$f": "1.0"}, {"$f": 1.0}, {"$b": "!!!"}, {"$b": "YQ"}, {"$b": 5}, {"$b": "é"},
    {"$t": 5}, {"$t": {"a": 1}}, {"$s": [[1]]}, {"$fs": [{"$d": []}]}, {"$d": 5}, {"$d": [1]},
    {"$d": [[1]]}, {"$d": [[1, 2, 3]]}, {"$d": [[[1], 2]]}, {"$d": [[{"$s": []}, 1]]},
    {"$s": "abc"}, [1, {"$i": None}], {"$t": [1, {}]}, {"a": 1, "b": 2, "c": 3},
], ids=repr)
def test_malformed_trees_raise_value_error(tree):
    for from_jail in (True, False):
        with pytest.raises(ValueError):
            _wire.decode_value(tree, from_jail=from_jail)


@pytest.mark.parametrize("tree,why", [
    ([0] * (_wire.ITEMS_FROM_JAIL + 1), "values"),
    ({"$t": [[0] * 1000] * 200}, "values"),
    ({"$i": "9" * (_wire.INT_DIGITS_FROM_JAIL + 1)}, "digits"),
    ({"$s": [{"$i": str(k * (2 ** 61 - 1))} for k in range(1, 10)]}, "same hash"),
])
def test_trees_over_the_limits_are_refused(tree, why):
    with pytest.raises(ValueError, match=why):
        _wire.decode_value(tree, from_jail=True)


@pytest.mark.parametrize("depth", [111, 1000, 100000])
def test_deep_trees_are_refused(depth):
    tree = 0
    for _ in range(depth):
        tree = {"$t": [tree]} if depth < 2000 else [tree]
    with pytest.raises(ValueError, match="deeply"):
        _wire.decode_value(tree, from_jail=True)


def test_truncated_and_garbled_frames_are_refused_or_awaited():
    good = _wire.encode_frame({"op": "pong", "id": "r1"}, b"body")
    for n in range(len(good)):
        assert _wire.parse_frame(bytearray(good[:n]), 1 << 20, _wire.HEADER_FROM_JAIL) is None
    with pytest.raises(ValueError, match="magic"):
        _wire.parse_frame(bytearray(b"XXXX" + good[4:]))
    with pytest.raises(ValueError, match="body of"):
        _wire.parse_frame(bytearray(good), 3)
    bad_json = _wire.FRAME.pack(_wire.MAGIC, 5, 0) + b'{"op"'
    head, _ = _wire.parse_frame(bytearray(bad_json))
    with pytest.raises(ValueError):
        _wire.decode_header_from_jail(head)


# ------------------------------------------------------------------ no pickle from the jail

class Detonator:
    """Unpickling this writes a file: what a jail would send to run code on the host."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_the_host_never_unpickles_what_the_jail_sends(tmp_path):
    marker = tmp_path / "unpickled"
    blob = base64.b64encode(pickle.dumps(Detonator(str(marker)))).decode()
    for tree in ({"$p": blob, "$r": "x"}, [{"$p": blob}], {"$d": [["k", {"$p": blob, "$r": ""}]]},
                 {"$t": [{"$p": blob, "$r": ""}]}):
        with pytest.raises(ValueError, match="pickled value is not accepted"):
            _wire.decode_value(tree, from_jail=True)
        with pytest.raises(ValueError, match="pickled value is not accepted"):
            _wire.decode_value(tree)       # refused by default, not only from the jail
    assert not marker.exists()
    # The jail's side never produces one: what is not plain data is refused there.
    with pytest.raises(_wire.PlainDataError):
        _wire.encode_value(Detonator(str(marker)))
    # Only the driver's values for the jail may be pickled (allow_pickle, host to jail).
    assert "$p" in _wire.encode_value(Detonator(str(marker)), allow_pickle=True)
    assert not marker.exists()


# ------------------------------------------------------------------ the server's output drain

def test_one_thread_drains_both_output_pipes_each_to_its_end_while_one_floods():
    import threading
    pipes = [os.pipe(), os.pipe()]
    drains = [_server._Drain(r, 1 << 20, n + 1, lambda *a: None) for n, (r, _w) in enumerate(pipes)]
    thread = threading.Thread(target=_server._drain_both, args=(drains,), daemon=True)
    thread.start()
    # A process of its own writes stdout's flood, as fast as the pipe takes it.
    flooder = subprocess.Popen(["cat", "/dev/zero"], stdout=pipes[0][1])
    try:
        time.sleep(0.2)           # the drain is busy with stdout's flood
        os.write(pipes[1][1], b"on stderr\n")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with drains[1].lock:
                if drains[1].buf.total:
                    break
            time.sleep(0.01)
        with drains[1].lock:
            assert bytes(drains[1].buf.head) == b"on stderr\n"
        assert flooder.poll() is None and drains[0].buf.total > 1 << 16
    finally:
        flooder.kill()
        flooder.wait()
    # Both writers closed: the thread reads each pipe to its end, then ends.
    os.write(pipes[1][1], b"last\n")
    for _r, w in pipes:
        os.close(w)
    thread.join(5)
    assert not thread.is_alive()
    assert bytes(drains[1].buf.head) == b"on stderr\nlast\n"
    for r, _w in pipes:
        os.close(r)


# ------------------------------------------------------------------ the frames' JSON

JSON_VALUES = [
    {}, [], "", 0, -1, 10 ** 40, 1.5, -0.0, 1e300, float("nan"), float("inf"), float("-inf"),
    True, False, None, "é\u2028\U0001F600\x00\"\\/", ("a", 1),
    {"op": "exec", "id": "r1", "code": "print(1)\n", "n": [1, 2.25, None, {"x": {"y": []}}]},
    {"k" * 1000: ["v" * 70000]}, [[[[[]]]]], {"1": 1, "2": 2},
]


@pytest.mark.parametrize("value", JSON_VALUES, ids=range(len(JSON_VALUES)))
def test_the_frames_json_is_json_s_own(value):
    # Made of CPython's _json directly (the json package costs a fresh session's start
    # milliseconds): the same text as json's encoder, and the same value back.
    text = _wire._encode_json(value)
    assert text == json.JSONEncoder(separators=(",", ":")).encode(value)
    back = _wire._decode_driver_json(text)
    assert repr(back) == repr(json.loads(text))


def test_the_frames_json_refuses_what_json_refuses():
    loop = []
    loop.append(loop)
    encode = json.JSONEncoder(separators=(",", ":")).encode
    for bad in (object(), {1j: 1}, {"x": {1, 2}}, b"bytes", loop):
        with pytest.raises((TypeError, ValueError)) as theirs:
            encode(bad)
        with pytest.raises(theirs.type, match="^%s$" % re.escape(str(theirs.value))):
            _wire._encode_json(bad)
    # A refusal leaves nothing behind for the next frame (fresh markers each time).
    shared = [1]
    assert _wire._encode_json([shared, shared]) == "[[1],[1]]"
    for bad in ("", " {}", "{} ", "{}{}", "{", "[1,]", "{'a': 1}", "nul", "1 2", "\"\\x\""):
        with pytest.raises(ValueError):
            _wire._decode_driver_json(bad)


def test_base64_without_the_base64_module_is_base64_s():
    for data in (b"", b"\x00", b"\xff" * 100, bytes(range(256))):
        text = _wire._b64encode(data)
        assert text == base64.b64encode(data)
        assert _wire._b64decode(text.decode("ascii"), validate=True) == data
        assert _wire._b64decode(text, validate=False) == base64.b64decode(text)
    for bad in ("AA=A", "A", "AB!C", "QUJD\n"):
        with pytest.raises(ValueError):
            _wire._b64decode(bad, validate=True)
    with pytest.raises(ValueError):
        _wire._b64decode("é", validate=False)


def test_an_interpreter_whose_json_accelerator_differs_gets_json_s_own(monkeypatch):
    # The codec tries _json once when it is made: one that takes other arguments (another
    # Python's) or is missing leaves the frames to the json package.
    import _json
    monkeypatch.setattr(_json, "make_encoder", lambda *a: (lambda o, level: ("x",)))
    encode, decode = _wire._json_codec()
    assert encode({"a": [1]}) == '{"a":[1]}' and decode('{"a":[1]}') == {"a": [1]}
    assert getattr(encode, "__self__", None).__class__ is json.JSONEncoder
    monkeypatch.setitem(sys.modules, "_json", None)
    encode, decode = _wire._json_codec()
    assert encode([1]) == "[1]" and decode is json.loads


def test_output_patterns_are_compiled_into_a_bounded_cache():
    # Attack: fnmatch keeps every pattern it compiles (32768); a tenant of pyjail-server
    # sending new large patterns with each run grew the server's memory without bound.
    from pyjail import _wire
    for i in range(50):
        assert _wire.matches_patterns("out/a%d.txt" % i, ["*.txt", "x%d-" % i + "y" * 500])
    assert _wire._glob_regexes.cache_info().currsize <= 8
    assert not _wire.matches_patterns("a.csv", ["*.txt"])
    assert _wire.matches_patterns("deep/a.csv", ["a.csv"]) and _wire.matches_patterns("a", None)
