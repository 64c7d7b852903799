"""Values as agents and notebooks make them, back from the jail: numpy scalars and arrays,
pandas DataFrames and Series, dates and times, Decimal, UUID, complex numbers; rebuilt on the
host without unpickling anything, or given as text when the host lacks numpy or pandas. A
cell's trailing value also comes as a notebook shows it (CellResult.formats). Every decoder
takes the jail's trees as hostile: the property tests at the end feed it made-up ones."""

import base64
import datetime
import decimal
import io
import json
import os
import tempfile
import uuid

import pytest

from pyjail_testing.package import import_or_skip

from pyjail import _wire
from test_hostile_jail import drive, hostile  # noqa: F401  (a fixture)

np = import_or_skip("numpy")
pd = import_or_skip("pandas")


def back(value):
    """``value`` as the host gets it from a jail: encoded, through JSON, decoded from_jail."""
    tree = _wire.encode_value(value)
    return _wire.decode_value(json.loads(json.dumps(tree)), from_jail=True)


@pytest.fixture
def without(monkeypatch):
    """The host pretends not to have the libraries named."""
    def hide(*names):
        monkeypatch.setattr(_wire, "_WITHOUT", set(names))
    return hide


def frame():
    return pd.DataFrame(
        {"city": ["Oslo", None, "Rome"], "rain_mm": [12.5, 3.0, np.nan],
         "days": pd.array([1, None, 3], dtype="Int64"), "kind": pd.Categorical(["a", "b", "a"]),
         "when": pd.to_datetime(["2024-01-01", None, "2024-03-01"]),
         "utc": pd.to_datetime(["2024-01-01"] * 3).tz_localize("UTC"),
         "flag": [True, False, True], "n": np.array([1, 2, 3], dtype=np.int32)},
        index=pd.Index(["x", "y", "z"], name="key"))


# ------------------------------------------------------------------ the codec

@pytest.mark.no_binary
@pytest.mark.parametrize("value", [
    datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
    datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=-5))),
    datetime.date(2024, 2, 29), datetime.time(23, 59, 59, 999999),
    datetime.timedelta(days=-3, seconds=7, microseconds=1), decimal.Decimal("-1.50E+3"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"), 1.5 - 2j, complex("1+infj"),
    {"when": [datetime.date(2024, 1, 1)], (1, 2): {decimal.Decimal("2")}},
])
def test_standard_library_values_come_back_as_they_went(value):
    got = back(value)
    assert got == value and type(got) is type(value)


@pytest.mark.no_binary
@pytest.mark.parametrize("value", [
    np.int64(55), np.int8(-3), np.uint64(2 ** 64 - 1), np.float32(1.25), np.float16(0.5),
    np.bool_(True), np.complex128(1 - 1j), np.datetime64("2024-01-02T03:04"),
    np.timedelta64(5, "ms"), np.str_("text"), np.bytes_(b"raw"),
])
def test_numpy_scalars_come_back_as_numpy_scalars(value):
    got = back(value)
    assert type(got) is type(value) and got == value and got.dtype == value.dtype


@pytest.mark.no_binary
@pytest.mark.parametrize("value", [
    np.arange(12, dtype=np.int16).reshape(3, 4), np.asfortranarray(np.ones((2, 3))),
    np.array([], dtype=np.float64), np.array(["a", "bcd"]), np.array([1 + 2j]),
    np.array(["2024-01-01", "NaT"], dtype="datetime64[s]"), np.array(True),
    np.zeros((2, 0, 3), dtype=np.uint8),
])
def test_numpy_arrays_come_back_with_their_dtype_and_shape(value):
    got = back(value)
    assert isinstance(got, np.ndarray) and got.dtype == value.dtype and got.shape == value.shape
    np.testing.assert_array_equal(got, value)
    assert got.flags.writeable


@pytest.mark.no_binary
def test_dataframes_and_series_come_back_with_their_dtypes_and_index():
    df = frame()
    pd.testing.assert_frame_equal(back(df), df)
    multi = df.reset_index().set_index(["city", "days"])
    pd.testing.assert_frame_equal(back(multi), multi)
    pd.testing.assert_series_equal(back(df["days"]), df["days"])
    pd.testing.assert_series_equal(back(multi["rain_mm"]), multi["rain_mm"])
    wide = pd.DataFrame({("a", "x"): [1], ("a", "y"): [2.0]})
    pd.testing.assert_frame_equal(back(wide), wide)
    numbered = pd.DataFrame(np.eye(3), columns=[10, 20, 30], index=pd.RangeIndex(5, 11, 2))
    pd.testing.assert_frame_equal(back(numbered), numbered)
    pd.testing.assert_frame_equal(back(pd.DataFrame()), pd.DataFrame())
    nested = back({"means": df.rain_mm.mean(), "table": df[["n"]]})
    assert type(nested["means"]) is np.float64
    pd.testing.assert_frame_equal(nested["table"], df[["n"]])


@pytest.mark.no_binary
def test_without_numpy_or_pandas_the_host_gets_text(without):
    df = frame()
    without("numpy", "pandas")
    got = back({"df": df, "arr": np.arange(3), "n": np.int64(55), "x": np.float64(0.5)})
    assert isinstance(got["df"], _wire.JailObject) and repr(got["df"]) == repr(df)
    assert repr(got["arr"]) == "array([0, 1, 2])"
    # A scalar becomes its Python value.
    assert got["n"] == 55 and type(got["n"]) is int and type(got["x"]) is float
    without("pandas")
    got = back({"df": df, "arr": np.arange(3)})
    assert isinstance(got["df"], _wire.JailObject) and isinstance(got["arr"], np.ndarray)


@pytest.mark.no_binary
def test_what_cannot_cross_safely_is_refused_by_the_jail():
    for value in (np.array([object()]), np.zeros(2, dtype=[("a", "i4")]),
                  pd.DataFrame({"a": [1]}).style):
        with pytest.raises(_wire.PlainDataError):
            _wire.encode_value(value)
    with pytest.raises(_wire.PlainDataError, match="larger than"):
        _wire.encode_value(np.zeros(1 << 20), limit=_wire.DATA_FROM_JAIL)


RANGE0 = ["range", 0, 0, 1, None]
RANGE1 = ["range", 0, 1, 1, None]
RANGE3 = ["range", 0, 3, 1, None]
HEAD = "{'descr': %s, 'fortran_order': False, 'shape': %s, }"     # an .npy header


def npy(array, header=None):
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    raw = buf.getvalue()
    if header is not None:
        body = raw[raw.index(b"\n") + 1:]
        head = header.encode("latin1")
        head += b" " * (-(len(head) + 11) % 64) + b"\n"
        raw = b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + body
    return {"$nd": [base64.b64encode(raw).decode(), "text"]}


class Detonator:
    """Leaves a file behind if it is ever unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.no_binary
def test_an_object_array_from_the_jail_is_never_unpickled(tmp_path):
    import pickle
    marker = tmp_path / "unpickled"
    header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
    head = header.encode() + b" " * 10 + b"\n"
    raw = b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + \
        pickle.dumps(np.array([Detonator(str(marker))], dtype=object))
    with pytest.raises(ValueError, match="dtype"):
        _wire.decode_value({"$nd": [base64.b64encode(raw).decode(), "x"]}, from_jail=True)
    assert not marker.exists()


@pytest.mark.no_binary
@pytest.mark.parametrize("tree,why", [
    # a header that claims far more than it carries: never allocated
    (npy(np.zeros(2), HEAD % ("'<f8'", "(1099511627775, 1099511627775)")), "shape|size"),
    (npy(np.zeros(2), HEAD % ("'<f8'", "(3,)")), "size"),
    (npy(np.zeros(2), HEAD % ("[('a', '<f8')]", "(1,)")), "dtype"),
    (npy(np.zeros(2), HEAD % ("'<U0'", "(2,)")), "dtype"),
    (npy(np.zeros(2), HEAD % ("'<f8'", "(%s)" % ("1," * 40))), "shape"),
    (npy(np.zeros(2), "__import__('os').system('false')"), "header"),
    ({"$nd": ["eA==", "x"]}, "npy|header|magic"),
    ({"$ns": ["|O", "AAAAAAAAAAA=", 1]}, "dtype"),
    ({"$ns": ["<i8", "AAAA", 1]}, "size"),
    ({"$ns": ["<M8[Europe/Oslo]", "AAAAAAAAAAA=", 1]}, "dtype"),
    ({"$dec": "9" * 5000}, "Decimal"),
    ({"$dec": "1e99999999999999999999"}, "Decimal"),
    ({"$uuid": "../../etc/passwd"}, "UUID"),
    ({"$dt": [2024, 13, 1, 0, 0, 0, 0, None, 0]}, "month"),
    ({"$dt": [2024, 1, 1, 0, 0, 0, 0, 86400 * 10 ** 6, 0]}, "timedelta|offset"),
    ({"$dt": [2024, 1, 1, 0, 0, 0, 0, None]}, "date or time"),
    ({"$td": [10 ** 12, 0, 0]}, "date or time|days|value"),
    ({"$c": [1, "2"]}, "complex"),
    ({"$df": [[], ["range", 0, 10 ** 12, 1, None], "t", RANGE0]}, "too many"),
    ({"$df": [[[{"$s": []}, "int64", [1, 2]]], RANGE3, "t", RANGE1]}, "column of 2"),
    ({"$df": [[["a", "int64", {"$nd": ["eA==", "x"]}]], RANGE1, "t", RANGE1]}, "npy|magic|header"),
    ({"$df": [[["a", "int64", [1]]], RANGE1, "t", RANGE0]}, "1 columns with 0 labels"),
    ({"$ser": [[1], "int64", [1], ["range", 0, 1, 1, None], "t"]}, "Series|hashable|malformed"),
    ({"$df": [[], ["multi", [None] * 40, [["int64", [1]]] * 40], "t", RANGE0]}, "index"),
    ({"$df": [[], ["range", 0, 1, 0, None], "t", RANGE0]}, "RangeIndex|too many"),
    # categories are hashed by pandas (unsalted): few of them, and codes within them
    ({"$ser": ["s", "category", {"$t": ["int64", list(range(5000)), [], False]}, RANGE0, "t"]},
     "more than 4096 categories"),
    ({"$ser": ["s", "category", {"$t": ["int64", [1, 2], npy(np.array([0, 2]))["$nd"] and
                                        npy(np.array([0, 2])), False]},
      ["range", 0, 2, 1, None], "t"]}, "out of range"),
    ({"$ser": ["s", "category", {"$t": ["int64", [1], [0], False]}, RANGE1, "t"]}, "codes"),
    ({"$df": [[], ["multi", ["a"], [["int64", [7]]], [npy(np.array([1]))]], "t", RANGE0]},
     "out of range"),
    ({"$df": [[], ["multi", ["a", "b"], [["int64", [7]], ["int64", [8]]],
                   [npy(np.array([0])), npy(np.array([0, 0]))]], "t", RANGE0]}, "codes"),
])
def test_malformed_rich_values_from_the_jail_are_refused(tree, why):
    with pytest.raises(ValueError, match=why):
        _wire.decode_value(tree, from_jail=True)


@pytest.mark.no_binary
def test_a_time_zone_crosses_as_its_offset_never_as_a_name():
    # A zone's name would make the host open a file the jail named.
    df = pd.DataFrame({"t": pd.to_datetime(["2024-06-01 12:00"]).tz_localize("Europe/Oslo")})
    got = back(df)
    assert got.t[0] == df.t[0] and got.t[0].utcoffset() == datetime.timedelta(hours=2)
    tree = _wire.encode_value(df)
    tree["$df"][0][0][1] = "datetime64[ns, ../../../../etc/passwd]"
    assert back(df).t.dtype == object
    assert _wire.decode_value(tree, from_jail=True).t.dtype == object


# ------------------------------------------------------------------ through a session

def test_a_cell_gives_back_numpy_and_pandas_values_and_their_formats(data_rootfs):
    import pyjail
    with pyjail.Session(rootfs=data_rootfs) as s:
        s.run("import numpy as np, pandas as pd, datetime, decimal")
        r = s.run("df = pd.DataFrame({'city': ['Oslo', 'Rome'], 'rain': [12.5, 3.0]})\ndf",
                  want_data=True)
        expected = pd.DataFrame({"city": ["Oslo", "Rome"], "rain": [12.5, 3.0]})
        pd.testing.assert_frame_equal(r.data, expected)
        assert r.formats["text/plain"] == r.value
        assert r.formats["text/html"].startswith("<div>") and "<table" in r.formats["text/html"]
        r = s.run("display(df)")
        assert "<table" in r.displays[0]["text/html"] and "Oslo" in r.stdout
        r = s.run("{'mean': df.rain.mean(), 'n': np.int64(2), 'a': np.arange(3),"
                  " 'd': datetime.date(2024, 1, 2), 'x': decimal.Decimal('1.5')}", want_data=True)
        assert type(r.data["mean"]) is np.float64 and r.data["mean"] == 7.75
        assert type(r.data["n"]) is np.int64 and r.data["d"] == datetime.date(2024, 1, 2)
        np.testing.assert_array_equal(r.data["a"], np.arange(3))
        assert "application/json" not in r.formats     # not JSON: numpy values
        r = s.run("{'a': [1, 2.5, None], 'b': 'x'}")
        assert r.formats["application/json"] == {"a": [1, 2.5, None], "b": "x"}
        # Past the limit: the repr, and why the value itself did not come.
        r = s.run("np.zeros(1 << 20)", want_data=True)
        assert isinstance(r.data, pyjail.JailObject) and r.value.startswith("array(")
        assert "larger than the 768 KiB" in r.data_error


def test_displayed_objects_come_with_their_formats(session):
    r = session.run("class Table:\n    def _repr_html_(self):\n        return '<table/>'\n"
                    "    def __repr__(self):\n        return 'Table()'\n"
                    "display(Table(), {'a': [1, None]}, 42)")
    assert r.stdout == "Table()\n{'a': [1, None]}\n42\n"
    assert r.displays == [{"text/html": "<table/>", "text/plain": "Table()"},
                          {"application/json": {"a": [1, None]}, "text/plain": "{'a': [1, None]}"}]
    r = session.run("for i in range(20):\n    display({'i': i})")
    assert len(r.displays) == 8 and r.stdout.count("\n") == 20


@pytest.mark.no_binary
def test_forged_formats_are_checked(hostile):
    out = drive("""
        s = pyjail.Session()
        try:
            r = s.run("x")
            out["formats"], out["displays"] = r.formats, r.displays
        finally:
            s.close()
    """, env=hostile("formats-forged"))
    assert out["formats"] == {"text/plain": "v", "text/latex": "$x$",
                              "application/json": {"a": [1]}}, out
    assert out["displays"] == [{"text/plain": "d"}], out
    for attack, why in (("displays-count", "bad list of displays"),
                        ("displays-entry", "bad display")):
        out = drive("""
            s = pyjail.Session()
            try:
                r = s.run("x")
                out["error"] = [r.error.type, r.error.message]
            finally:
                s.close()
        """, env=hostile(attack))
        assert out["error"][0] == "ProtocolError" and why in out["error"][1], out


def test_the_pandas_agent_tool_answers_with_the_value_langchain_does(data_rootfs):
    import_or_skip("langchain_experimental")
    from langchain_experimental.tools import PythonAstREPLTool as Theirs
    from pyjail.langchain import PythonAstREPLTool, PythonREPL
    code = "import numpy as np\nnp.arange(11).sum()"
    theirs = Theirs().invoke(code)     # runs here: the test's own code
    tool = PythonAstREPLTool(python_repl=PythonREPL(rootfs=data_rootfs))
    try:
        ours = tool.invoke(code)
        assert ours == theirs == 55 and type(ours) is type(theirs)
        df = tool.invoke("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
        pd.testing.assert_frame_equal(df, pd.DataFrame({"a": [1, 2]}))
    finally:
        tool.close()


def test_smolagents_final_answers_come_back_as_the_local_executor_gives_them(data_rootfs):
    import_or_skip("smolagents")
    from smolagents import CodeAgent
    from pyjail.smolagents import PyjailExecutor
    from test_smolagents import ScriptedModel
    setup = ("import numpy as np, pandas as pd, datetime\n"
             "df = pd.DataFrame({'city': ['Oslo', 'Rome'], 'rain': [12.5, 3.0]})\n")
    answers = {
        "df": pd.DataFrame({"city": ["Oslo", "Rome"], "rain": [12.5, 3.0]}),
        "np.arange(6).reshape(2, 3)": np.arange(6).reshape(2, 3),
        "datetime.date(2026, 1, 31)": datetime.date(2026, 1, 31),
        "{'total': df.rain.sum(), 'count': np.int64(2)}": {"total": np.float64(15.5),
                                                           "count": np.int64(2)},
    }
    with PyjailExecutor(rootfs=data_rootfs, timeout=60) as executor:
        for code, expected in answers.items():
            agent = CodeAgent(tools=[], model=ScriptedModel([setup + "final_answer(%s)" % code]),
                              executor=executor, verbosity_level=0,
                              additional_authorized_imports=["numpy", "pandas", "datetime"])
            got = agent.run("go")
            if isinstance(expected, pd.DataFrame):
                pd.testing.assert_frame_equal(got, expected)
            elif isinstance(expected, np.ndarray):
                assert isinstance(got, np.ndarray)
                np.testing.assert_array_equal(got, expected)
            else:
                assert got == expected and type(got) is type(expected)
                if isinstance(got, dict):
                    assert [type(v) for v in got.values()] == [np.float64, np.int64]


# ------------------------------------------------------------------ hostile trees

hypothesis = import_or_skip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("PYJAIL_FUZZ_EXAMPLES", "200"))
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "pyjail-hypothesis-%d" % os.getuid()))
fuzz = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

RICH_TAGS = sorted(_wire._RICH_TAGS)
scalars = st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | \
    st.floats() | st.text(max_size=12) | \
    st.sampled_from(["<i8", "|b1", "<U3", "|O", "<M8[ns]", "range", "index", "multi",
                     "category", "Int64", "str", "datetime64[ns, UTC]", "AAAAAAAAAAA=",
                     base64.b64encode(b"\x93NUMPY\x01\x00").decode()])
trees = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) |
    st.builds(lambda tag, x: {tag: x}, st.sampled_from(RICH_TAGS + ["$t", "$d", "$s"]),
              st.lists(inner, max_size=9) | inner),
    max_leaves=30)


@pytest.mark.no_binary
@fuzz
@given(trees)
@example({"$df": [[["a", "int64", [1]]], ["range", 0, 1, 1, None], "t", ["range", 0, 1, 1, None]]})
@example({"$ser": [None, "category", [{"$d": []}], ["index", None, "str", ["a"]], "t"]})
@example({"$df": [[], ["multi", ["a"], [["str", [1, 2]]], [[0]]], "t", ["index", None, "str", []]]})
@example({"$ns": ["<U3", "AAAA", None]})
def test_any_rich_tree_decodes_or_raises_value_error(tree):
    try:
        _wire.decode_value(tree, from_jail=True)
    except ValueError:
        pass


def _npy_bytes(array):
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


@pytest.mark.no_binary
@fuzz
@given(st.binary(max_size=300), st.integers(0, 300), st.integers(0, 255))
def test_any_changed_npy_decodes_or_raises_value_error(tail, at, byte):
    raw = bytearray(_npy_bytes(np.arange(6, dtype=np.int32).reshape(2, 3)))
    raw[at % len(raw)] = byte
    for data in (bytes(raw), bytes(raw) + tail, bytes(raw[:at])):
        try:
            _wire.decode_value({"$nd": [base64.b64encode(data).decode(), "t"]}, from_jail=True)
        except ValueError:
            pass


values = st.recursive(
    st.none() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8) |
    st.dates() | st.datetimes(timezones=st.none() | st.timezones()) | st.timedeltas() |
    st.decimals(allow_nan=False) | st.uuids() | st.complex_numbers(allow_nan=False) |
    st.builds(np.int64, st.integers(-2 ** 63, 2 ** 63 - 1)) |
    st.builds(np.float32, st.floats(width=32, allow_nan=False)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=20)


@pytest.mark.no_binary
@fuzz
@given(values)
def test_rich_values_come_back_as_they_went(value):
    def norm(v):
        # A zone's datetime comes back with its fixed offset: the same instant and offset.
        if isinstance(v, datetime.datetime) and v.tzinfo is not None:
            return (v.utcoffset(), v.replace(tzinfo=None), v.fold)
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return (type(v), v)
    assert norm(back(value)) == norm(value)
