"""A spot-traces file holds whole numbers: ``read_trace`` refuses 1.5, true or "3" (which ``int()`` read as 1, 1
and 3) with a ValueError naming the file and the place, as it refuses other bad input. And the window reader is
public (``pricing.loading.window``), as the simulator's CLI uses it."""

import json

import pytest

from pricing import loading
from pricing.loading import read_trace


def trace(tmp_path, gap=60, data=(1, 0, 1)):
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": list(data)}))
    return p


def test_a_trace_of_whole_numbers_is_read_as_it_is(tmp_path):
    assert read_trace(trace(tmp_path, 600, [1, 0, 2, 0])) == (600, [1, 0, 2, 0])


@pytest.mark.parametrize("bad, where", [(1.5, "data[1]"), (True, "data[1]"), (False, "data[1]"), ("1", "data[1]"),
                                        (1.0, "data[1]"), (None, "data[1]"), ([1], "data[1]")])
def test_a_count_that_is_not_a_whole_number_is_refused_naming_the_file_and_where(tmp_path, bad, where):
    p = trace(tmp_path, 60, [1, bad, 0])
    with pytest.raises(ValueError) as exc:
        read_trace(p)
    assert str(exc.value).startswith(f"{p}: {where} ") and repr(bad) in str(exc.value)


@pytest.mark.parametrize("bad", [60.5, True, "60", 60.0])
def test_a_gap_that_is_not_a_whole_number_is_refused_naming_it(tmp_path, bad):
    p = trace(tmp_path, bad)
    with pytest.raises(ValueError) as exc:
        read_trace(p)
    assert str(exc.value).startswith(f"{p}: metadata.gap_seconds ") and repr(bad) in str(exc.value)


@pytest.mark.parametrize("doc", [{"metadata": {"gap_seconds": 60}, "data": "101"}, {"metadata": {}, "data": [1]},
                                 {"data": [1]}, [1, 2]])
def test_other_bad_shapes_are_still_refused_naming_the_file(tmp_path, doc):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=f"^{p}: "):
        read_trace(p)


def test_the_window_reader_is_public_and_the_cli_uses_it():
    from pricing import simulate_cli

    assert simulate_cli.window is loading.window
    w = loading.window('{"gap_seconds": 60, "available": [1, 0]}', "f line 1")
    assert w["available"] == [1, 0]
    with pytest.raises(ValueError, match="^f line 2: gap_seconds"):
        loading.window('{"gap_seconds": true, "available": [1]}', "f line 2")
