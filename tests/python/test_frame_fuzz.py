"""Property tests (Hypothesis) of what parses the jail's bytes on the host: the frame
decoder (parse_frame, decode_header_from_jail, the driver's Channel) and the value
decoder. Whatever the jail sends, the driver gets a frame, waits for more, or refuses
it with a ValueError (ProtocolError in the Channel): never another exception, never
a frame that is not in the table of operations.

The normal run tries PYJAIL_FUZZ_EXAMPLES examples per property (default 200: a few
seconds each). For a longer search, e.g. before a release:

    PYJAIL_FUZZ_EXAMPLES=20000 python -m pytest tests/python/test_frame_fuzz.py

Whatever a search finds is fixed and added as an @example, so that every run tries it
again; the @examples below are hand-picked edge cases of the same kind.
"""

import json
import os
import tempfile

import pytest

from pyjail_testing.package import import_or_skip

hypothesis = import_or_skip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pyjail import _channel, _wire  # noqa: E402

pytestmark = pytest.mark.no_binary

EXAMPLES = int(os.environ.get("PYJAIL_FUZZ_EXAMPLES", "200"))
# Hypothesis's caches (no example database: the regressions are the @examples here) go
# to the temporary directory, not into the checkout.
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "pyjail-hypothesis-%d" % os.getuid()))
fuzz = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20) | \
    st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=5) |
                           st.dictionaries(st.text(max_size=8), inner, max_size=5),
                           max_leaves=30)



@st.composite
def table_headers(draw):
    """A header built from the table: a jail operation, its required fields, some of its
    optional ones, each of a kind the table allows, or anything at all for the rest."""
    name = draw(st.sampled_from(sorted(n for n, op in _wire.OPS.items()
                                       if op.sender == _wire.JAIL)))
    op = _wire.OPS[name]
    header = {"op": name}
    kind_values = {
        _wire.STR: st.text(max_size=_wire.ID_LIMIT), _wire.INT: st.integers(),
        _wire.NAT: st.integers(min_value=0), _wire.BOOL: st.booleans(),
        _wire.LIST: st.lists(json_values, max_size=3),
        _wire.DICT: st.dictionaries(st.text(max_size=8), json_values, max_size=3),
        _wire.NULL: st.none(), _wire.ANY: json_values,
    }
    for key, kinds in op.fields.items():
        if key in op.required or draw(st.booleans()):
            header[key] = draw(st.one_of([kind_values[k] for k in kinds]))
    return header


@fuzz
@given(table_headers(), st.binary(max_size=64), st.lists(st.integers(1, 40), max_size=8))
def test_table_frames_come_through_whole_in_any_pieces(header, body, cuts):
    data = _wire.encode_frame(header, body)
    buf = bytearray()
    frames = []
    pos = 0
    for cut in cuts + [len(data)]:
        buf += data[pos:pos + cut]
        pos += cut
        frame = _wire.parse_frame(buf, 1 << 10, _wire.HEADER_FROM_JAIL)
        if frame is not None:
            frames.append(frame)
    assert len(frames) == 1 and not buf
    head, got = frames[0]
    assert got == body
    assert _wire.decode_header_from_jail(head) == header


@fuzz
@given(st.binary(max_size=200))
@example(b"PJF1\x00\x00\x00\x02\x00\x00\x00\x00[]")
@example(b"PJF1\x00\x00\x00\x04\x00\x00\x00\x00\xff\xfe{}")
@example(b"PJF1\xff\xff\xff\xff\x00\x00\x00\x00")
def test_any_bytes_give_a_frame_nothing_yet_or_a_value_error(data):
    buf = bytearray(data)
    try:
        frame = _wire.parse_frame(buf, 1 << 10, _wire.HEADER_FROM_JAIL)
    except ValueError:
        return
    if frame is None:
        assert buf == data
        return
    try:
        header = _wire.decode_header_from_jail(frame[0])
    except ValueError:
        return
    _wire.check_header(header, _wire.JAIL)


@fuzz
@given(json_values)
@example({"op": "ok", "id": "r", "size": 1.5})
@example({"op": "ok", "id": "r", "__proto__": 1})
@example({"op": ["pong"], "id": "r"})
def test_any_json_gives_a_checked_header_or_a_value_error(value):
    head = json.dumps(value).encode()
    try:
        header = _wire.decode_header_from_jail(head)
    except ValueError:
        return
    assert isinstance(header, dict) and _wire.OPS[header["op"]].sender == _wire.JAIL


@fuzz
@given(table_headers(), st.binary(max_size=32), st.data())
def test_a_garbled_frame_in_the_channel_is_a_protocol_error_or_waits(header, body, data):
    frame = bytearray(_wire.encode_frame(header, body))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    r, w = os.pipe()
    try:
        chan = _channel.Channel(w, r, 1 << 10)
        chan.buf += frame[:data.draw(st.integers(0, len(frame)))]
        try:
            got = chan._parse()
        except _channel.ProtocolError:
            return
        if got is not None:
            _wire.check_header(got[0], _wire.JAIL)
    finally:
        os.close(r)
        os.close(w)


# The value decoder: JSON trees that use the codec's tags, in and out of shape.
tagged = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) |
    st.builds(lambda tag, x: {tag: x},
              st.sampled_from(["$i", "$f", "$b", "$t", "$s", "$fs", "$d", "$p", "$x"]),
              inner | st.lists(inner, max_size=3) |
              st.lists(st.lists(inner, min_size=2, max_size=2), max_size=3) |
              st.sampled_from(["nan", "inf", "-1", "YWJj", "12345678901234567890"])) |
    st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=25)


@fuzz
@given(tagged)
@example({"$d": [[{"$s": []}, 1]]})
@example({"$s": [[1]]})
@example({"$i": "1", "$r": "x"})
@example({"$b": "\u00e9"})
def test_any_tree_decodes_or_raises_value_error(tree):
    try:
        _wire.decode_value(tree, from_jail=True)
    except ValueError:
        pass


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() |
    st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) |
    st.frozensets(st.integers() | st.text(), max_size=4) |
    st.dictionaries(st.text() | st.integers(), inner, max_size=4),
    max_leaves=20)


@fuzz
@given(plain)
def test_plain_data_comes_back_as_it_went(value):
    tree = _wire.encode_value(value)
    assert _wire.decode_value(json.loads(json.dumps(tree)), from_jail=True) == value
