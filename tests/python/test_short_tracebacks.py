"""What a model is shown of a failed cell: the frames of its own code and the exception, each
run of library frames as one line naming the libraries (CellError.short_traceback); the whole
traceback on request (``traceback=True``)."""

import pytest

from pyjail_testing.package import import_or_skip

# A cell whose error is raised three frames deep in the standard library's json, called from
# a function the model defined in an earlier cell.
DEFINE = "import json\ndef parse(text):\n    return json.loads(text)\n"
FAIL = "data = parse('{')\n"


def test_a_cell_error_has_a_short_traceback_of_the_code_s_own_frames(session):
    session.run(DEFINE, name="tools.py")
    err = session.run(FAIL).error
    short, full = err.short_traceback, err.traceback
    assert short.startswith("Traceback (most recent call last):\n")
    assert 'File "<cell-2>", line 1, in <module>' in short
    assert 'File "tools.py", line 3, in parse' in short and "return json.loads(text)" in short
    assert "  [... 3 frames in json ...]\n" in short
    assert short.endswith("json.decoder.JSONDecodeError: Expecting property name enclosed in "
                          "double quotes: line 1 column 2 (char 1)\n")
    assert "/usr/lib/python3" not in short and "/usr/lib/python3" in full
    assert len(short) < len(full) / 2
    # A syntax error has no frames: both are the same.
    err = session.run("def (").error
    assert err.short_traceback == err.traceback and "SyntaxError" in err.short_traceback


def test_chained_exceptions_and_deep_recursion_stay_short(session):
    err = session.run("try:\n    {}['k']\nexcept KeyError as e:\n"
                      "    raise ValueError('no k') from e").error
    assert "KeyError" in err.traceback and "KeyError" not in err.short_traceback
    assert err.short_traceback.endswith("ValueError: no k\n")
    err = session.run("def f(n):\n    return f(n + 1)\nf(0)").error
    assert err.type == "RecursionError"
    assert "more times]" in err.short_traceback and len(err.short_traceback) < 2000


def test_smolagents_shows_the_model_the_short_traceback_unless_asked():
    import_or_skip("smolagents")
    from pyjail.smolagents import PyjailExecutionError, PyjailExecutor
    for full in (False, True):
        with PyjailExecutor(traceback=full) as ex:
            ex(DEFINE)
            with pytest.raises(PyjailExecutionError) as raised:
                ex(FAIL)
        text = str(raised.value)
        assert "JSONDecodeError" in text and "return json.loads(text)" in text
        assert ("/usr/lib/python3" in text) is full
        assert ("[... 3 frames in json ...]" in text) is not full


def test_langchain_tools_answer_with_the_short_traceback_when_asked():
    import_or_skip("langchain_core")
    from pyjail.langchain import PythonREPL, PythonREPLTool
    answers = {}
    for mode in (False, "short", True):
        tool = PythonREPLTool(python_repl=PythonREPL(traceback=mode))
        try:
            tool.invoke(DEFINE)
            answers[mode] = tool.invoke(FAIL)
        finally:
            tool.close()
    # LangChain's own one line by default (the drop-in's contract).
    assert answers[False] == ("JSONDecodeError('Expecting property name enclosed in double "
                              "quotes: line 1 column 2 (char 1)')")
    assert "[... 3 frames in json ...]" in answers["short"] and \
        "/usr/lib/python3" not in answers["short"]
    assert "/usr/lib/python3" in answers[True]
    with pytest.raises(ValueError, match="traceback must be"):
        PythonREPL(traceback="long")
