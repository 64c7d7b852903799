"""The protocol between the driver (the host's ``pyjail`` package) and the
in-jail server: framing, the table of operations, the checked decoder of
frames from the jail, and the plain-data codec. Both sides import this module:
the driver as ``pyjail._wire``, the jail as ``pyjail_wire`` (see JAIL_MODULES).
Standard library only; Python 3.9 or newer.

The protocol
------------
The channel is the jail's stdin (driver to jail) and stdout (jail to driver).
A frame is ``MAGIC`` (4 bytes), the header's and the body's lengths (big-endian
uint32), the header (a JSON object, at most HEADER_FROM_JAIL bytes when the jail
sends it) and the body (raw bytes, never parsed: files, output, sources).

Start-up: the jail's program is ``python -I -c BOOT HASH`` (BOOT is built by
``pyjail._launch`` from the constants here). If the rootfs's copies of
JAIL_MODULES under JAIL_DIR hash to HASH, it imports them; otherwise it sends a
``need-source`` frame and the driver answers with one ``source`` frame holding
every module (so a driver never talks to a server of another version). The
server then says ``hello`` (or ``refused``: it could not make itself safe).

Requests carry an ``id``; the answer to one carries the same ``id``. Every
operation, who sends it and the fields of its header are in OPS, and nothing
else is accepted from the jail: ``decode_header_from_jail`` checks each frame
against it, and the server dispatches the driver's requests through it.

A Session: ``ping`` -> ``pong``; ``exec`` (a cell) -> ``result``, with ``call``
-> ``reply`` for each host function the cell calls on the way, and (``stream``)
``output`` frames of what the cell writes, as it writes it; ``expose``,
``set``, ``put``, ``list``, ``killall`` -> ``ok``; ``get`` -> ``file``; any
request -> ``error`` when it fails; ``bye`` ends the server. ``pyjail.run``
with files: ``put`` each input, then ``spawn`` -> ``out`` frames (the program's
output) and one ``exited`` (its status and the files it wrote); the jail then
ends with the program's status.

Values (a cell's result, host-function arguments and results, variables) cross
as JSON trees (encode_value, decode_value): the driver may send a pickle to the
jail, the jail never makes the driver unpickle anything.
"""

from __future__ import annotations

import binascii
import functools
import os
import select
import struct
import time

# typing.TYPE_CHECKING, without importing typing: in the jail, where these
# modules start every fresh Session's server, typing cost 2-3 ms of the start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

PROTOCOL = 1

# How long an interrupt (SIGINT) may take from the driver through pyjail and the jail's pid 1
# to the in-jail server, on a busy host: a cell waits at most this for those still on their way.
INTERRUPT_RELAY_S = 0.2
MAGIC = b"PJF1"
FRAME = struct.Struct(">4sII")
# Where the rootfs holds the in-jail modules, and which: (in-jail module name,
# this package's file), in the order they are loaded. The server is the last.
JAIL_DIR = "/usr/lib/pyjail"
JAIL_MODULES = (("pyjail_wire", "_wire.py"), ("pyjail_spawn", "_spawn.py"),
                ("pyjail_server", "_server.py"))
WORKDIR = "/work"
MAX_HEADER = 16 << 20       # what the server accepts as a frame's header (from the host)
# What the driver accepts as a frame's header from the jail, and so the most
# this server ever sends: a jail's JSON costs the host up to ~25 times its size
# once decoded (`[{},{},...]`), so the cap keeps that to tens of MiB. Bulk data
# (files, output) travels in bodies, which are never parsed.
HEADER_FROM_JAIL = 1 << 20
REPR_LIMIT = 64 << 10       # characters of a value's repr sent back
ERROR_LIMIT = 4096          # characters of an error message sent back
SKIPPED_LIMIT = 1000        # files named as left out of pyjail.run's outputs
TRACEBACK_LIMIT = 64 << 10  # characters of a traceback sent back
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")  # the images a cell may show
IMAGES_LIMIT = 32           # images one cell's result holds
DATA_LIMIT = 4 << 20        # bytes of a value encoded as plain data
DATA_FROM_JAIL = 768 << 10  # bytes of a cell's value sent back as data (within a header)
# What a cell's trailing value may be shown as besides its repr and images
# (CellResult.formats), each at most FORMAT_LIMIT characters.
FORMAT_MIMES = ("text/html", "text/markdown", "text/latex", "application/json")
FORMAT_LIMIT = 256 << 10
DISPLAYS_LIMIT = 8          # display() calls of one cell whose formats come back
ID_LIMIT = 64               # characters of a request's id


# ---------------------------------------------------------------- operations

DRIVER, JAIL = "driver", "jail"

# A field's kind: the JSON types it may have. Integers are never bools, and a
# NAT is an integer >= 0 (a size, a count).
STR, INT, NAT, BOOL, LIST, DICT, ANY = "str", "int", "nat", "bool", "list", "dict", "any"
NULL = "null"


class Op:
    """One operation: who sends it, and its header's fields: {name: kinds},
    kinds separated by '|', a name ending in '_' for an optional field."""

    __slots__ = ("name", "sender", "required", "fields")

    def __init__(self, op: str, sender: str, /, **fields: str) -> None:
        self.name, self.sender = op, sender
        self.fields: Dict[str, Tuple[str, ...]] = {}
        self.required: Tuple[str, ...] = ()
        for key, kinds in fields.items():
            optional = key.endswith("_")
            key = key.rstrip("_")
            self.fields[key] = tuple(kinds.split("|"))
            if not optional:
                self.required += (key,)


_ops = [
    # driver -> jail
    Op("source", DRIVER, modules=LIST),          # body: the modules' sources, in order
    Op("ping", DRIVER, id=STR),
    Op("bye", DRIVER),
    Op("exec", DRIVER, id=STR, code=STR, output_limit_=NAT, kill_failed_=BOOL, data_=BOOL,
       str_=BOOL, name_=STR, stream_=BOOL, image_limit_=NAT, formats_=BOOL,
       interrupts_=NAT),   # interrupts: the SIGINTs the driver sent this server so far
    Op("expose", DRIVER, id=STR, functions=DICT, ends_cell=LIST),
    Op("set", DRIVER, id=STR, variables=DICT),
    Op("put", DRIVER, id=STR, path=STR, mode_=NAT),   # body: the file
    Op("get", DRIVER, id=STR, path=STR, max_bytes=NAT),
    Op("list", DRIVER, id=STR, path=STR, patterns="list|null", max_entries=NAT),
    Op("killall", DRIVER, id=STR),
    Op("spawn", DRIVER, id=STR, argv=LIST, script=STR, collect="bool|list", max_files=NAT,
       max_bytes=NAT, inputs=DICT),               # body: the program's stdin
    Op("reply", DRIVER, id=STR, value_=ANY, token_=STR, error_=STR, type_=STR),
    # jail -> driver
    Op("need-source", JAIL),
    Op("refused", JAIL, error=STR),
    Op("hello", JAIL, protocol=INT, pid=NAT, python_=STR, server_=STR),
    Op("pong", JAIL, id=STR),
    Op("result", JAIL, id=STR, error="dict|null", value="str|null", stdout=LIST, stderr=LIST,
       value_str_=STR, data_=ANY, killed_=NAT, ended_by_=DICT,
       images_=LIST, data_error_=STR, formats_=DICT,
       displays_=LIST),  # body: the output, then the images ([mime, size] each, in order)
    Op("error", JAIL, id="str|null", error=STR, errno_=INT, strerror_=STR, too_large_=NAT),
    Op("ok", JAIL, id=STR, size_=NAT, mtime_ns_=INT, entries_=LIST, truncated_=BOOL,
       failed_=DICT, killed_=NAT),
    Op("file", JAIL, id=STR),                     # body: the file
    Op("call", JAIL, id=STR, name=STR, args=ANY, kwargs=ANY),
    Op("out", JAIL, stream=NAT),                  # body: output of run()'s program
    Op("output", JAIL, id=STR, stream=NAT),       # body: a cell's output, as it is written
    Op("exited", JAIL, id=STR, status=INT, files=LIST, skipped=LIST),  # body: the files
]
OPS: Dict[str, Op] = {op.name: op for op in _ops}
del _ops


def _kind_of(value: Any) -> str:
    t = type(value)
    if t is str:
        return STR
    if t is bool:
        return BOOL
    if t is int:
        return NAT if value >= 0 else INT
    if t is list:
        return LIST
    if t is dict:
        return DICT
    if value is None:
        return NULL
    return "float"


def check_header(header: "Dict[str, Any]", sender: str) -> Op:
    """The operation of a decoded header that ``sender`` sent, checked against
    OPS: a known operation of that sender, every required field there, no
    other field, each of its kind, and an ``id`` of at most ID_LIMIT characters.
    ValueError otherwise."""
    name = header.get("op")
    op = OPS.get(name) if type(name) is str else None
    if op is None or op.sender != sender:
        raise ValueError("unknown operation %r" % (str(name)[:40],))
    fields = op.fields
    for key, value in header.items():
        if key == "op":
            continue
        kinds = fields.get(key)
        if kinds is None:
            raise ValueError("a %s frame with an unknown field %r" % (name, str(key)[:40]))
        if ANY in kinds:
            continue
        kind = _kind_of(value)
        if kind not in kinds and not (kind == NAT and INT in kinds):
            raise ValueError("a %s frame whose %s is %s, not %s"
                             % (name, key, kind, " or ".join(kinds)))
    for key in op.required:
        if key not in header:
            raise ValueError("a %s frame without %s" % (name, key))
    rid = header.get("id")
    if type(rid) is str and len(rid) > ID_LIMIT:
        raise ValueError("a %s frame with an id of %d characters" % (name, len(rid)))
    return op


# ---------------------------------------------------------------- framing

def _b64encode(data: bytes) -> bytes:
    """base64.b64encode, without the base64 module (it imports re, and re enum:
    milliseconds of every fresh session's start in the jail; see _json_codec)."""
    return binascii.b2a_base64(data, newline=False)


def _b64decode(data: "Any", validate: bool) -> bytes:
    """base64.b64decode(data, validate=validate), without the base64 module
    where binascii does it all (Python 3.11 and newer: strict_mode)."""
    if isinstance(data, str):
        data = data.encode("ascii")     # as base64's: ValueError if it is not ASCII
    try:
        return binascii.a2b_base64(data, strict_mode=validate)
    except TypeError:       # an older binascii, without strict_mode
        import base64
        return base64.b64decode(data, validate=validate)


def _json_codec() -> "Tuple[Callable[[Any], str], Callable[[str], Any]]":
    """The frames' JSON: an encoder (json.JSONEncoder(separators=(",", ":"))'s
    output) and a decoder of a JSON text with nothing around it (the driver's
    headers, which that encoder wrote), made of CPython's _json accelerator
    itself: the json package imports re, and re imports enum, which cost about
    5 ms of every fresh session's start in the jail. Where the interpreter has
    no _json, json's own (which needs it for neither)."""
    try:
        import _json
        make_encoder, ascii_str = _json.make_encoder, _json.encode_basestring_ascii

        def default(o: "Any") -> "Any":    # json.JSONEncoder.default's refusal
            raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)

        def encode(o: "Any") -> str:
            if isinstance(o, str):
                return ascii_str(o)
            # As json.JSONEncoder.iterencode: new markers (the circular-reference check) each time.
            return "".join(make_encoder({}, default, ascii_str, None, ":", ",", False, False, True)(o, 0))

        class _Context:     # what _json's scanner reads of a json.JSONDecoder
            strict = True
            object_hook = object_pairs_hook = None
            parse_float, parse_int = float, int
            parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                              "NaN": float("nan")}.__getitem__

        scan = _json.make_scanner(_Context())

        def decode(text: str) -> "Any":
            try:
                value, end = scan(text, 0)
            except StopIteration as e:
                raise ValueError("no JSON value at character %s" % e.value) from None
            if end != len(text):
                raise ValueError("more than one JSON value (character %d)" % end)
            return value

        # Tried once here: an interpreter whose _json takes other arguments gets json's.
        if decode(encode({"a": [1, 2.5, None, "\u00e9"]})) != {"a": [1, 2.5, None, "\u00e9"]}:
            raise TypeError("_json disagrees with itself")
    except (ImportError, AttributeError, TypeError, ValueError):
        import json
        encode = json.JSONEncoder(separators=(",", ":")).encode
        decode = json.loads
    return encode, decode


# One encoder for every frame (json.dumps with options builds a new one per
# call), and the in-jail server's decoder of the driver's headers.
_encode_json, _decode_driver_json = _json_codec()


def encode_frame(header: "Dict[str, Any]", body: bytes = b"") -> bytes:
    head = _encode_json(header).encode("utf-8")
    return FRAME.pack(MAGIC, len(head), len(body)) + head + bytes(body)


def parse_frame(buf: bytearray, max_body: "Optional[int]" = None,
                max_header: int = MAX_HEADER) -> "Optional[Tuple[bytes, bytes]]":
    """The first frame in ``buf`` as (header bytes, body), taken out of ``buf``;
    None while ``buf`` does not hold all of it yet. Its sizes are checked (the
    header's against ``max_header``, the body's against ``max_body`` if given)
    before anything is allocated for it: ValueError if they, or its magic, are
    wrong."""
    if len(buf) < FRAME.size:
        return None
    magic, hlen, blen = FRAME.unpack_from(buf)
    if magic != MAGIC:
        raise ValueError("bad frame magic %r" % bytes(magic))
    if hlen > max_header:
        raise ValueError("frame header of %d bytes (at most %d accepted)" % (hlen, max_header))
    if max_body is not None and blen > max_body:
        raise ValueError("frame body of %d bytes (at most %d expected)" % (blen, max_body))
    end = FRAME.size + hlen + blen
    if len(buf) < end:
        return None
    with memoryview(buf) as view:
        head = bytes(view[FRAME.size:FRAME.size + hlen])
        body = bytes(view[FRAME.size + hlen:end])
    del buf[:end]
    return head, body


# Integers of more digits than this are refused from the jail: int() of n
# digits costs O(n**2) where Python does not cap it itself (before 3.11), so a
# jail's megabyte-long number would cost the host seconds.
INT_DIGITS_FROM_JAIL = 4300


def _bounded_int(text: str) -> int:
    if len(text) > INT_DIGITS_FROM_JAIL:
        raise ValueError("an integer of %d digits" % len(text))
    return int(text)


_jail_json_decoder: "Optional[Callable[[str], Any]]" = None


def _decode_jail_json(text: str) -> "Any":
    """json's decoder, one for every header from the jail (json.loads with
    options builds a new one per call); made on first use: the jail's own
    copy of this module never needs it (see _json_codec)."""
    global _jail_json_decoder
    if _jail_json_decoder is None:
        import json
        _jail_json_decoder = json.JSONDecoder(parse_int=_bounded_int).decode
    return _jail_json_decoder(text)


def decode_header_from_jail(head: bytes) -> "Dict[str, Any]":
    """A frame header sent by the jail, parsed at a cost the host can bear and
    checked against OPS (check_header): ValueError unless it is a JSON object
    that is a well-formed frame of the jail's. Every host-side reader of the
    jail's frames goes through this. Its size is capped before this
    (parse_frame with HEADER_FROM_JAIL), which bounds the objects JSON builds
    (~25 times its size at worst); its keys are str, whose hashes are salted
    per host process, so no jail can make them collide; its nesting is bounded
    by the interpreter's recursion limit, and numbers by INT_DIGITS_FROM_JAIL."""
    try:
        header = _decode_jail_json(head.decode("utf-8"))
    except RecursionError:
        raise ValueError("frame header nested too deeply")
    if not isinstance(header, dict):
        raise ValueError("frame header is not a JSON object")
    check_header(header, JAIL)
    return header


# ---------------------------------------------------------------- waiting

# Waiting for the other side's next frame. A process asleep on a pipe is often
# woken on another CPU, and on a VM that halts idle vCPUs (no guest halt
# polling) each such wake-up costs ~30 µs, two per round trip: more than a
# trivial cell's whole work. So both sides poll without sleeping for up to
# SPIN_S before they sleep. A spin that ends without a frame (a slow cell, an
# idle session, or a CPU shared with the other side or other work, which the
# spin only holds up) has the next 1, 2, 4, ... up to MAX_SKIP waits sleep at
# once; a spin that gets its frame starts that over. With a single CPU there
# is no spinning.
SPIN_S = 100e-6
MAX_SKIP = 64


class Spinner:
    """Spins (see SPIN_S) before a wait for ``fd`` to be readable."""

    def __init__(self, fd: int) -> None:
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN)
        try:
            self.enabled = len(os.sched_getaffinity(0)) > 1
        except (AttributeError, OSError):
            self.enabled = False
        self.skip = 0       # waits left that sleep at once
        self.backoff = 1    # how many the next spin that fails skips

    def spin(self, deadline: "Optional[float]" = None) -> bool:
        """Poll for at most SPIN_S without sleeping: True once ``fd`` is
        readable, False when the caller is to sleep."""
        if not self.enabled:
            return False
        if self.skip:
            self.skip -= 1
            return False
        end = time.monotonic() + SPIN_S
        if deadline is not None and deadline < end:
            return False        # too close to the deadline to be worth it
        poll = self.poller.poll
        while not poll(0):
            if time.monotonic() >= end:
                self.skip, self.backoff = self.backoff, min(2 * self.backoff, MAX_SKIP)
                return False
        self.backoff = 1
        return True


# ---------------------------------------------------------------- plain data

class PlainDataError(TypeError):
    """A value that cannot cross the jail's boundary as plain data."""


def encode_value(value: "Any", allow_pickle: bool = False, limit: int = DATA_LIMIT) -> "Any":
    """Encode plain data (None, bool, int, float, str, bytes, list, tuple, dict,
    set, frozenset) as a JSON-compatible tree; anything else raises
    PlainDataError unless allow_pickle (host to jail only: the jail never sends
    a pickle, and the driver never loads one)."""
    budget = [limit]

    def charge(n: int) -> None:
        budget[0] -= n
        if budget[0] < 0:
            raise PlainDataError("value larger than %d bytes" % limit)

    def enc(v: Any, depth: int) -> Any:
        if depth > 100:
            raise PlainDataError("value nested too deeply")
        if v is None or isinstance(v, bool):
            charge(5)
            return v
        t = type(v)
        if t.__module__ not in ("builtins", "collections"):
            # numpy and pandas values, dates, Decimal, UUID: tagged trees
            # the host rebuilds without unpickling (see _encode_rich).
            rich = _encode_rich(v, enc, depth, charge, allow_pickle)
            if rich is not None:
                return rich
        # Subclasses (a str subclass such as smolagents' AgentText, a
        # namedtuple, an OrderedDict) cross as their plain base type.
        if isinstance(v, int):
            charge(24)
            v = int.__int__(v)
            return v if -(1 << 63) <= v < (1 << 63) else {"$i": str(v)}
        if isinstance(v, float):
            charge(24)
            v = float.__float__(v)
            if v != v or v in (float("inf"), float("-inf")):
                return {"$f": repr(v)}
            return v
        if isinstance(v, str):
            charge(len(v) + 2)
            return str.__str__(v)
        if isinstance(v, (bytes, bytearray)):
            charge(len(v) * 4 // 3 + 8)
            return {"$b": _b64encode(bytes(v)).decode("ascii")}
        if isinstance(v, list):
            charge(2)
            return [enc(x, depth + 1) for x in v]
        if isinstance(v, tuple):
            charge(8)
            return {"$t": [enc(x, depth + 1) for x in v]}
        if isinstance(v, (set, frozenset)):
            charge(8)
            return {"$fs" if isinstance(v, frozenset) else "$s": [enc(x, depth + 1) for x in v]}
        if isinstance(v, dict):
            charge(8)
            return {"$d": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        if t is complex:
            charge(48)
            return {"$c": [enc(v.real, depth + 1), enc(v.imag, depth + 1)]}
        if allow_pickle:
            import pickle
            try:
                blob = pickle.dumps(v, protocol=4)
            except Exception as e:
                raise PlainDataError("%s cannot be pickled: %s" % (t.__name__, e))
            charge(len(blob) * 4 // 3)
            try:
                text = str(v)[:REPR_LIMIT]
            except Exception:
                text = "<%s>" % t.__name__
            return {"$p": _b64encode(blob).decode("ascii"), "$r": text}
        raise PlainDataError("%s is not plain data" % t.__name__)

    return enc(value, 0)


# What a value decoded from the jail (a cell's data, a host function's
# arguments) may hold: this many values in all, and at most SAME_HASH_LIMIT
# keys of one set or dict with the same hash.
ITEMS_FROM_JAIL = 1 << 17
SAME_HASH_LIMIT = 8


def _refuse_colliding_keys(keys: "List[Any]") -> None:
    """ValueError when more than SAME_HASH_LIMIT of the keys of a set or dict
    share a hash. Keys with one hash make each insertion compare with all the
    others before it: n keys a jail chose to collide (ints that are multiples
    of 2**61-1 all hash to 0) would cost the host n**2/2 comparisons. str and
    bytes hashes are salted per host process, but those of ints, floats and
    tuples of them are not. Counted by sorting, without a hash table."""
    hashes = sorted(map(hash, keys))
    run = 1
    for i in range(1, len(hashes)):
        run = run + 1 if hashes[i] == hashes[i - 1] else 1
        if run > SAME_HASH_LIMIT:
            raise ValueError("more than %d keys with the same hash" % SAME_HASH_LIMIT)


def decode_value(tree: "Any", allow_pickle: bool = False, pickle_fallback: bool = True,
                 from_jail: bool = False) -> "Any":
    """The inverse of encode_value. Raises ValueError on anything malformed. A
    pickled object that cannot be rebuilt (its class is not importable here)
    becomes its str() if pickle_fallback, else raises ValueError. A numpy or
    pandas value is rebuilt when this interpreter has that library, else it
    is a JailObject holding the text the jail gave of it.

    ``from_jail`` (the driver, decoding what the jail sent): the cost stays
    linear in the tree's size: at most ITEMS_FROM_JAIL values, integers of at
    most INT_DIGITS_FROM_JAIL digits, and sets and dicts whose keys do not
    collide (see _refuse_colliding_keys); anything else raises ValueError."""
    budget = [ITEMS_FROM_JAIL if from_jail else -1]

    def keyed(items: Iterable[Any]) -> List[Any]:
        items = list(items)
        if from_jail:
            _refuse_colliding_keys(items)
        return items

    def dec(v: Any, depth: int) -> Any:
        if depth > 110:
            raise ValueError("value nested too deeply")
        if from_jail:
            budget[0] -= 1
            if budget[0] < 0:
                raise ValueError("more than %d values" % ITEMS_FROM_JAIL)
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [dec(x, depth + 1) for x in v]
        if not isinstance(v, dict) or len(v) not in (1, 2):
            raise ValueError("malformed value")
        if "$p" in v:
            if not allow_pickle:
                raise ValueError("a pickled value is not accepted here")
            import pickle
            try:
                return pickle.loads(_b64decode(v["$p"], validate=False))
            except Exception as e:
                if pickle_fallback:
                    return v.get("$r")
                raise ValueError("cannot rebuild it here: %s: %s" % (type(e).__name__, e))
        (tag, x), = v.items()
        if tag in _RICH_TAGS:
            try:
                return _decode_rich(tag, x, lambda i: dec(i, depth + 1), from_jail)
            except ValueError:
                raise
            except Exception as e:
                # numpy's and pandas' own refusals of what the jail made up
                raise ValueError("a malformed %s value (%s)" % (tag, type(e).__name__))
        if tag == "$i" and isinstance(x, str):
            return _bounded_int(x) if from_jail else int(x)
        if tag == "$f" and x in ("nan", "inf", "-inf"):
            return float(x)
        if tag == "$b" and isinstance(x, str):
            return _b64decode(x.encode("ascii"), validate=True)
        if isinstance(x, list):
            if tag == "$t":
                return tuple(dec(i, depth + 1) for i in x)
            if tag == "$s":
                return set(keyed(dec(i, depth + 1) for i in x))
            if tag == "$fs":
                return frozenset(keyed(dec(i, depth + 1) for i in x))
            if tag == "$d":
                keys, values = [], []
                for pair in x:
                    if not isinstance(pair, list) or len(pair) != 2:
                        raise ValueError("malformed dict entry")
                    keys.append(dec(pair[0], depth + 1))
                    values.append(dec(pair[1], depth + 1))
                return dict(zip(keyed(keys), values))
        raise ValueError("malformed value (tag %r)" % (tag,))

    try:
        return dec(tree, 0)
    except (TypeError, RecursionError, binascii.Error, OverflowError, ArithmeticError) as e:
        raise ValueError("malformed value: %s" % e)


# ---------------------------------------------------------------- rich values
#
# What agents and notebooks produce beyond plain data, as tagged trees (one
# key, a list or a string under it), each rebuilt on the other side without
# unpickling anything:
#
#   {"$c": [re, im]}                          complex
#   {"$dt": [y, mo, d, h, mi, s, us, off_us|null, fold]}    datetime
#   {"$date": [y, mo, d]}   {"$time": [h, mi, s, us, off_us|null, fold]}
#   {"$td": [days, seconds, us]}              timedelta
#   {"$dec": "1.50"}   {"$uuid": "32 hex digits"}
#   {"$ns": [dtype, raw base64, plain]}       a numpy scalar (plain: its .item())
#   {"$nd": [.npy base64, text]}              a numpy array (numpy.save, no pickle)
#   {"$ser": [name, dtype, values, index, text]}      a pandas Series
#   {"$df": [[[label, dtype, values], ...], index, text, columns]}   a pandas DataFrame
#
# A time zone crosses as its UTC offset (a fixed-offset timezone on the other
# side: a zone's name would be a file name chosen by the jail). A column or
# index of a numpy dtype crosses as an .npy array, any other as a list of
# values. The text is what the host shows of a numpy or pandas value when it
# has not that library (a JailObject): numpy's or pandas' own repr.

_RICH_TAGS = frozenset(("$c", "$dt", "$date", "$time", "$td", "$dec", "$uuid", "$ns", "$nd",
                        "$ser", "$df"))
RICH_TEXT_LIMIT = 8192      # characters of a numpy or pandas value's text form
DECIMAL_DIGITS_FROM_JAIL = 4300
NDIM_LIMIT = 32
# numpy dtypes that cross, as dtype.str gives them: booleans, integers,
# floats, complex numbers, datetime64 and timedelta64, fixed-size strings and
# bytes. Never objects (they need pickle), structured or void types.
_NUMPY_DTYPE = (r"[<>|=]?(?:b1|[iu][1248]|f[248]|c(?:8|16)|"
                r"[Mm]8(?:\[(?:Y|M|W|D|h|m|s|ms|us|ns|ps|fs|as)\])?|[US][1-9][0-9]{0,6})")
# pandas dtypes other than numpy's that a column is rebuilt as (its values
# cross as a list); any other (object, a time zone's datetimes) stays object.
_PANDAS_DTYPES = frozenset(["string", "str", "boolean", "Int8", "Int16", "Int32",
                            "Int64", "UInt8", "UInt16", "UInt32", "UInt64", "Float32",
                            "Float64"])
_PANDAS_UTC = r"datetime64\[(?:s|ms|us|ns), UTC\]"    # (a zone's name would be a file name)
# A categorical's categories: pandas checks they are unique in a hash table
# whose hashes are not salted (pandas' own, for numbers), so a jail could make
# n of them collide and cost the host n**2/2 probes. Nothing else decoded here
# is hashed: a MultiIndex is rebuilt from its levels and codes as they are.
CATEGORIES_FROM_JAIL = 4096
# Libraries this interpreter pretends not to have (the tests' switch).
_WITHOUT: "set" = set()


def _library(name: str) -> "Any":
    """The module ``name`` if this interpreter has it, else None."""
    if name in _WITHOUT:
        return None
    import sys
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        import importlib
        return importlib.import_module(name)
    except Exception:
        return None


def _text_of(v: "Any") -> str:
    try:
        text = repr(v)
    except Exception as e:
        text = "<%s: its repr failed: %s>" % (type(v).__name__, type(e).__name__)
    if len(text) > RICH_TEXT_LIMIT:
        text = text[:RICH_TEXT_LIMIT] + "... [%d more characters]" % (len(text) - RICH_TEXT_LIMIT)
    return text


def _offset_us(tz_value: "Any") -> "Any":
    off = tz_value.utcoffset()
    if off is None:
        return None
    return (off.days * 86400 + off.seconds) * 1000000 + off.microseconds


def _npy(a: "Any") -> bytes:
    import io
    buf = io.BytesIO()
    import sys
    sys.modules["numpy"].save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _encode_rich(v: "Any", enc: "Any", depth: int, charge: "Any", allow_pickle: bool) -> "Any":
    """The tagged tree of a rich value, or None if ``v`` is none of them. With
    ``allow_pickle`` (host to jail) numpy and pandas values are left to pickle,
    which keeps every detail."""
    import sys
    dt = sys.modules.get("datetime")
    if dt is not None:
        if isinstance(v, dt.datetime):
            charge(64)
            return {"$dt": [v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond,
                            _offset_us(v), v.fold]}
        if isinstance(v, dt.date):
            charge(32)
            return {"$date": [v.year, v.month, v.day]}
        if isinstance(v, dt.time):
            charge(48)
            return {"$time": [v.hour, v.minute, v.second, v.microsecond, _offset_us(v), v.fold]}
        if isinstance(v, dt.timedelta):
            charge(32)
            return {"$td": [v.days, v.seconds, v.microseconds]}
    decimal = sys.modules.get("decimal")
    if decimal is not None and isinstance(v, decimal.Decimal):
        text = str(v)
        charge(len(text) + 8)
        return {"$dec": text}
    uuid = sys.modules.get("uuid")
    if uuid is not None and isinstance(v, uuid.UUID):
        charge(40)
        return {"$uuid": v.hex}
    if allow_pickle:
        return None
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(v, np.generic):
            dtype = v.dtype
            if dtype.hasobject or dtype.kind == "V":
                return None
            raw = v.tobytes()
            charge(len(raw) * 4 // 3 + 24)
            try:
                item = v.item()
                plain = enc(item, depth + 1) if not isinstance(item, type(v)) else None
            except PlainDataError:
                plain = None
            if plain is None:
                plain = _text_of(v)
            return {"$ns": [dtype.str, _b64encode(raw).decode("ascii"), plain]}
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject or v.dtype.kind == "V":
                raise PlainDataError("a numpy array of dtype %s is not plain data" % v.dtype)
            charge(v.nbytes * 4 // 3 + 200)
            text = _text_of(v)
            charge(len(text))
            return {"$nd": [_b64encode(_npy(v)).decode("ascii"), text]}
    pd = sys.modules.get("pandas")
    if pd is not None:
        if isinstance(v, pd.Series):
            text = _text_of(v)
            charge(len(text) + 16)
            return {"$ser": [enc(v.name, depth + 1), str(v.dtype),
                             _encode_column(v, enc, depth + 1, charge),
                             _encode_index(v.index, enc, depth + 1, charge, pd), text]}
        if isinstance(v, pd.DataFrame):
            text = _text_of(v)
            charge(len(text) + 16)
            columns = []
            for i, label in enumerate(v.columns):
                column = v.iloc[:, i]
                columns.append([enc(label, depth + 2), str(column.dtype),
                                _encode_column(column, enc, depth + 2, charge)])
            return {"$df": [columns, _encode_index(v.index, enc, depth + 1, charge, pd), text,
                            _encode_index(v.columns, enc, depth + 1, charge, pd)]}
    return None


def _encode_column(values: "Any", enc: "Any", depth: int, charge: "Any") -> "Any":
    """A Series' or an Index's values: an .npy array when their dtype is
    numpy's own, else a list of plain values (missing ones as None)."""
    import sys
    dtype = values.dtype
    np = sys.modules["numpy"]
    if isinstance(dtype, np.dtype) and not dtype.hasobject and dtype.kind != "V":
        return enc(values.to_numpy(), depth)
    pd = sys.modules["pandas"]
    if isinstance(dtype, pd.CategoricalDtype):
        # (categories' dtype, categories, codes, ordered), as a tuple: not a list of values
        cats = dtype.categories
        return {"$t": [str(cats.dtype), _encode_column(cats, enc, depth + 1, charge),
                       enc(np.asarray(pd.Categorical(values).codes), depth + 1),
                       bool(dtype.ordered)]}
    missing = (pd.NA, pd.NaT)
    out = [None if any(x is m for m in missing) else x for x in values.to_numpy(dtype=object)]
    charge(8)
    return enc(out, depth)


def _encode_index(index: "Any", enc: "Any", depth: int, charge: "Any", pd: "Any") -> "Any":
    if isinstance(index, pd.RangeIndex):
        charge(40)
        return ["range", index.start, index.stop, index.step, enc(index.name, depth + 1)]
    if isinstance(index, pd.MultiIndex):
        levels = [[str(level.dtype), _encode_column(level, enc, depth + 2, charge)]
                  for level in index.levels]
        codes = [enc(index.codes[i], depth + 2) for i in range(index.nlevels)]
        return ["multi", [enc(n, depth + 2) for n in index.names], levels, codes]
    return ["index", enc(index.name, depth + 1), str(index.dtype),
            _encode_column(index, enc, depth + 1, charge)]


def _ints(x: "Any", n: int) -> "List[Any]":
    """``x``, a list of ``n`` small ints (or None where allowed), else ValueError."""
    if not isinstance(x, list) or len(x) != n:
        raise ValueError("malformed date or time")
    for i in x:
        if i is not None and (type(i) is not int or abs(i) > 1 << 47):
            raise ValueError("malformed date or time")
    return x


def _tz(offset_us: "Any") -> "Any":
    import datetime
    if offset_us is None:
        return None
    # timezone() refuses offsets of a day or more: ValueError.
    return datetime.timezone(datetime.timedelta(microseconds=offset_us))


def _numpy_dtype(np: "Any", text: "Any") -> "Any":
    import re
    if not isinstance(text, str) or not re.fullmatch(_NUMPY_DTYPE, text):
        raise ValueError("a numpy dtype that is not accepted: %r" % (str(text)[:40],))
    return np.dtype(text)


def _npy_header(fmt: "Any", f: "Any") -> "Any":
    version = fmt.read_magic(f)
    if version == (1, 0):
        return (version,) + fmt.read_array_header_1_0(f, max_header_size=4096)
    if version == (2, 0):
        return (version,) + fmt.read_array_header_2_0(f, max_header_size=4096)
    raise ValueError("an .npy version %r" % (version,))


def _load_npy(np: "Any", raw: bytes) -> "Any":
    """An .npy array from the jail, its header checked before numpy reads
    the data: an accepted dtype, at most NDIM_LIMIT dimensions, and exactly
    as many bytes as its shape and dtype say (a header that claims more must
    not make the host allocate it). Never unpickled (allow_pickle=False)."""
    import io
    import warnings
    fmt = np.lib.format
    f = io.BytesIO(raw)
    try:
        with warnings.catch_warnings():
            # (numpy parses the header with ast: the jail's escapes would warn on our stderr)
            warnings.simplefilter("ignore")
            version, shape, fortran, dtype = _npy_header(fmt, f)
    except Exception as e:
        raise ValueError("a malformed .npy header: %s: %s" % (type(e).__name__, str(e)[:200]))
    _numpy_dtype(np, dtype.str)
    if not isinstance(shape, tuple) or len(shape) > NDIM_LIMIT or \
            not all(type(d) is int and 0 <= d < 1 << 40 for d in shape):
        raise ValueError("an .npy array of a bad shape")
    count = 1
    for d in shape:
        count *= d
    if count * dtype.itemsize != len(raw) - f.tell():
        raise ValueError("an .npy array whose data is not the size its header says")
    try:
        return np.load(io.BytesIO(raw), allow_pickle=False)
    except Exception as e:
        raise ValueError("an .npy array numpy cannot read: %s" % type(e).__name__)


def _b64(x: "Any") -> bytes:
    if not isinstance(x, str):
        raise ValueError("malformed value")
    return _b64decode(x.encode("ascii"), validate=True)


def _text(x: "Any") -> str:
    if not isinstance(x, str):
        raise ValueError("malformed value")
    return x


def _decode_rich(tag: str, x: "Any", dec: "Any", from_jail: bool) -> "Any":
    """The value of a rich tagged tree (see _encode_rich); ValueError if it is
    malformed. ``dec`` decodes an inner tree (counted against the budget)."""
    import datetime
    if tag == "$c":
        if not isinstance(x, list) or len(x) != 2:
            raise ValueError("malformed complex")
        re_, im = dec(x[0]), dec(x[1])
        if type(re_) is not float or type(im) is not float:
            raise ValueError("malformed complex")
        return complex(re_, im)
    if tag == "$dt":
        y, mo, d, h, mi, s, us, off, fold = _ints(x, 9)
        return datetime.datetime(y, mo, d, h, mi, s, us, tzinfo=_tz(off), fold=fold)
    if tag == "$date":
        return datetime.date(*_ints(x, 3))
    if tag == "$time":
        h, mi, s, us, off, fold = _ints(x, 6)
        return datetime.time(h, mi, s, us, tzinfo=_tz(off), fold=fold)
    if tag == "$td":
        return datetime.timedelta(*_ints(x, 3))
    if tag == "$dec":
        import decimal
        if not isinstance(x, str) or len(x) > DECIMAL_DIGITS_FROM_JAIL + 16:
            raise ValueError("malformed Decimal")
        try:
            return decimal.Decimal(x)
        except decimal.InvalidOperation:
            raise ValueError("malformed Decimal")
    if tag == "$uuid":
        import re
        import uuid
        if not isinstance(x, str) or not re.fullmatch("[0-9a-f]{32}", x):
            raise ValueError("malformed UUID")
        return uuid.UUID(hex=x)
    if not isinstance(x, list):
        raise ValueError("malformed value (tag %r)" % (tag,))
    np = _library("numpy")
    if tag == "$ns":
        if len(x) != 3:
            raise ValueError("malformed numpy scalar")
        if np is None:
            return dec(x[2])       # its .item(), or its text
        dtype = _numpy_dtype(np, x[0])
        raw = _b64(x[1])
        if len(raw) != dtype.itemsize:
            raise ValueError("a numpy scalar of the wrong size")
        return np.frombuffer(raw, dtype=dtype)[0]
    if tag == "$nd":
        if len(x) != 2:
            raise ValueError("malformed numpy array")
        text = _text(x[1])
        if np is None:
            return JailObject(text)
        return _load_npy(np, _b64(x[0]))
    pd = _library("pandas") if np is not None else None
    if tag == "$ser":
        if len(x) != 5:
            raise ValueError("malformed Series")
        text = _text(x[4])
        if pd is None:
            return JailObject(text)
        index = _decode_index(x[3], dec, np, pd)
        values = _decode_column(x[1], x[2], dec, np, pd, len(index))
        values.index = index
        values.name = dec(x[0])
        return values
    if tag == "$df":
        if len(x) != 4 or not isinstance(x[0], list):
            raise ValueError("malformed DataFrame")
        text = _text(x[2])
        if pd is None:
            return JailObject(text)
        index = _decode_index(x[1], dec, np, pd)
        columns = []
        for entry in x[0]:
            if not isinstance(entry, list) or len(entry) != 3:
                raise ValueError("malformed DataFrame column")
            columns.append(_decode_column(entry[1], entry[2], dec, np, pd, len(index)))
        labels = _decode_index(x[3], dec, np, pd)
        if len(labels) != len(columns):
            raise ValueError("a DataFrame of %d columns with %d labels"
                             % (len(columns), len(labels)))
        frame = pd.concat(columns, axis=1, ignore_index=True) if columns else \
            pd.DataFrame(index=range(len(index)))
        frame.index = index
        frame.columns = labels
        return frame
    raise ValueError("malformed value (tag %r)" % (tag,))


def _decode_column(dtype: "Any", tree: "Any", dec: "Any", np: "Any", pd: "Any",
                   length: "Optional[int]") -> "Any":
    """A Series (index 0..n-1) of a column's values, of its dtype when that is
    numpy's (from the .npy array) or one of _PANDAS_DTYPES."""
    if not isinstance(dtype, str):
        raise ValueError("malformed column")
    values = dec(tree)
    if dtype == "category" and isinstance(values, tuple):
        if len(values) != 4 or not isinstance(values[0], str) or type(values[3]) is not bool:
            raise ValueError("malformed categorical")
        cats = _decode_column(values[0], values[1], lambda v: v, np, pd, None)
        if len(cats) > CATEGORIES_FROM_JAIL:
            raise ValueError("a categorical of more than %d categories" % CATEGORIES_FROM_JAIL)
        codes = _codes(np, values[2], len(cats), length)
        series = pd.Series(pd.Categorical.from_codes(codes, categories=pd.Index(cats),
                                                     ordered=values[3]))
    elif isinstance(values, list):
        import re
        known = dtype in _PANDAS_DTYPES or re.fullmatch(_PANDAS_UTC, dtype)
        series = pd.Series(values, dtype=dtype if known else object)
    elif isinstance(values, np.ndarray) and values.ndim == 1:
        series = pd.Series(values, copy=False)
    else:
        raise ValueError("malformed column")
    if length is not None and len(series) != length:
        raise ValueError("a column of %d values for an index of %d" % (len(series), length))
    return series


def _codes(np: "Any", codes: "Any", choices: int, length: "Optional[int]") -> "Any":
    """Codes of a categorical or a MultiIndex level, checked: a 1-d integer
    array of ``length`` values from -1 (missing) to ``choices`` - 1."""
    if not isinstance(codes, np.ndarray) or codes.ndim != 1 or codes.dtype.kind not in "iu" or \
            (length is not None and len(codes) != length):
        raise ValueError("malformed codes")
    if len(codes) and (int(codes.min()) < -1 or int(codes.max()) >= choices):
        raise ValueError("codes out of range")
    return codes.astype(np.int64, copy=False)


def _decode_index(tree: "Any", dec: "Any", np: "Any", pd: "Any") -> "Any":
    if not isinstance(tree, list) or not tree:
        raise ValueError("malformed index")
    kind = tree[0]
    if kind == "range" and len(tree) == 5:
        start, stop, step = _ints(tree[1:4], 3)
        if step == 0 or abs(stop - start) // abs(step) > ITEMS_FROM_JAIL:
            raise ValueError("a RangeIndex of too many values")
        return pd.RangeIndex(start, stop, step, name=dec(tree[4]))
    if kind == "index" and len(tree) == 4:
        values = _decode_column(tree[2], tree[3], dec, np, pd, None)
        return pd.Index(values, name=dec(tree[1]), tupleize_cols=False)
    if kind == "multi" and len(tree) == 4 and all(isinstance(t, list) for t in tree[1:]) and \
            0 < len(tree[1]) == len(tree[2]) == len(tree[3]) <= NDIM_LIMIT:
        levels, codes = [], []
        for level, level_codes in zip(tree[2], tree[3]):
            if not isinstance(level, list) or len(level) != 2:
                raise ValueError("malformed index level")
            values = _decode_column(level[0], level[1], dec, np, pd, None)
            levels.append(pd.Index(values, tupleize_cols=False))
            codes.append(_codes(np, dec(level_codes), len(values),
                                len(codes[0]) if codes else None))
        # Not from_arrays, which would hash the jail's values (see CATEGORIES_FROM_JAIL).
        return pd.MultiIndex(levels=levels, codes=codes, names=[dec(n) for n in tree[1]],
                             verify_integrity=False)
    raise ValueError("malformed index")


class JailObject:
    """A value that stayed in the jail: only its text came back (its repr,
    or numpy's or pandas' own text when this interpreter lacks them)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JailObject) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


# ---------------------------------------------------------------- processes

def proc_stat(pid: int) -> "Optional[List[bytes]]":
    """The fields of /proc/PID/stat after the command name (state, parent pid, ...),
    as bytes; None if the process is gone or the file cannot be read. The jail's
    server reads its jail's /proc with it, the driver the host's."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def processes() -> "List[Tuple[int, str, int, int]]":
    """(pid, state, parent pid, start time in ticks) of every process in /proc: the
    jail's inside the jail, the host's when the driver calls it."""
    out: "List[Tuple[int, str, int, int]]" = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = proc_stat(int(entry))
        if fields is None:
            continue
        try:
            out.append((int(entry), fields[0].decode(), int(fields[1]), int(fields[19])))
        except (IndexError, ValueError, UnicodeDecodeError):
            continue
    return out


def stop_then_kill(listing: "Callable[[], List[Tuple[int, str]]]",
                   send: "Callable[[int, int], bool]",
                   suspects: "Optional[Callable[[], Iterable[int]]]" = None,
                   stop_everyone: "Optional[Callable[[], None]]" = None,
                   passes: int = 200) -> "Set[int]":
    """Ends processes that may be forking while they are ended (a fork bomb):
    SIGSTOP them until all are stopped, then SIGKILL them until none is left.

    Why stopped first: a killed process frees its place under the pid limit
    and the bomb's next fork takes it, so a killer that gets less CPU than the
    bomb (no cgroup CPU limit, a busy host) never catches up; a stopped one
    keeps its place. Why until each *is* stopped (its state, not the signal
    sent): one stopped in the middle of fork() still makes its child. Why a
    fresh list of pids after the states: /proc is listed before the states
    are read, so a child forked in between is not in that list.

    ``listing()``: (pid, state letter of /proc/PID/stat) of each process to
    end, zombies ("Z", "X") included; it may reap them. ``suspects()``: a
    cheaper list of their pids, read between listings so that stopping
    outruns forking (the listing's pids if None). ``send(pid, sig)``: whether
    the signal was sent. ``stop_everyone()``, if given, is called once when ten
    passes have not stopped them all: a bomb whose processes live shorter than
    a pass of a starved killer is never caught one by one. Bounded by twice
    ``passes`` listings; returns the pids killed. The in-jail server and the
    host's driver both end a cell's processes with it."""
    import signal
    stopped: "Set[int]" = set()
    killed: "Set[int]" = set()

    def stop(pids: "Iterable[int]") -> bool:
        new = [pid for pid in pids if pid not in stopped]
        stopped.update(pid for pid in new if send(pid, signal.SIGSTOP))
        return bool(new)

    for n in range(2 * passes):
        if n == 10 and stop_everyone is not None and not killed:
            stop_everyone()
        elif suspects is not None and not killed and stop(suspects()):
            continue
        listed = listing()
        live = [(pid, state) for pid, state in listed if state not in "ZX"]
        if not live:
            break
        # Any that runs (not yet stopped, or woken) is stopped before one more
        # is killed: the places the killed ones free are never the bomb's.
        running = [pid for pid, state in live if state not in "Tt" and pid not in killed]
        if running:
            stopped.difference_update(running)      # signalled, not yet stopped: again
            stop(running)
            time.sleep(0.001)
            continue
        fresh = suspects() if suspects is not None else [pid for pid, _state in listing()]
        if set(fresh) <= {pid for pid, _state in listed}:
            killed.update(pid for pid, _state in live if send(pid, signal.SIGKILL))
            time.sleep(0.002)
    return killed


# ---------------------------------------------------------------- file names

def matches_patterns(rel: str, patterns: "Optional[List[str]]") -> bool:
    """Whether a file's relative name matches one of the glob patterns (its
    whole name or its base name), or any name when ``patterns`` is None. The
    server picks the files to send back with it, and the driver checks them."""
    if patterns is None:
        return True
    base = rel.rsplit("/", 1)[-1]
    return any(r.match(rel) or r.match(base) for r in _glob_regexes(tuple(patterns)))


@functools.lru_cache(maxsize=8)
def _glob_regexes(patterns: "Tuple[str, ...]") -> "List[Any]":
    """The patterns as compiled regular expressions (fnmatch's, case-sensitive), the last
    8 sets kept. Attack: fnmatch keeps every pattern it compiles (32768), so a tenant of
    pyjail-server sending new large patterns with each run grew the server without bound;
    here at most 8 sets stay, and re's own cache is bounded too."""
    import fnmatch
    import re
    return [re.compile(fnmatch.translate(p)) for p in patterns]


def list_files(root: str, patterns: "Optional[List[str]]",
               max_entries: int) -> "List[List[Any]]":
    """Regular files under ``root`` as [relative name, size] (sorted), filtered
    by matches_patterns: what the server lists and sends back."""
    import stat
    out: "List[List[Any]]" = []
    root = os.path.normpath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            rel = os.path.relpath(full, root)
            if not matches_patterns(rel, patterns):
                continue
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            out.append([rel, st.st_size])
            if len(out) >= max_entries:
                return out
    return out


# ---------------------------------------------------------------- capped output

class Capture:
    """Bytes written to a stream, capped: the first three quarters of the
    limit are kept from the start, the last quarter from the end; the count
    of bytes in between is remembered."""

    def __init__(self, limit: int) -> None:
        self.set_limit(limit)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def set_limit(self, limit: int) -> None:
        self.limit = max(int(limit), 0)
        self.tail_limit = self.limit // 4
        self.head_limit = self.limit - self.tail_limit

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            excess = len(self.tail) - self.tail_limit
            if excess > 0:
                del self.tail[:excess]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)


