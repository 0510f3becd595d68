"""`broker status` on a terminal: the columns that say nothing make room for the reason before any that says something.

At 80 columns, 8 failed jobs took 98 lines: a blank ``queue``, a blank ``starts ~`` and a ``team`` column of
"default" on every line were kept, the reason 13 characters wide; at 120 the blank columns were kept while the
reason wrapped."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from broker import cli as broker_cli

COLUMNS = [("id", "whole"), "name", "team", ("state", "whole"), ("queue", "whole"), ("starts ~", "whole"),
           ("spent", "whole"), ("budget", "whole"), "reason"]
DROP = ("due", "starts ~", "queue", "team", "budget")


def _failed(n: int, team=lambda i: "default") -> list[list[str]]:
    return [[f"j-{i:010d}", f"failing-job-{i}", team(i), "failed", "", "", "$0.00", "$1.00",
             f"The training script raised ValueError: bad learning rate given for run {i}."] for i in range(n)]


def _shown(width: int, rows: list[list[str]]) -> list[str]:
    con = Console(file=io.StringIO(), width=width)
    broker_cli._print_table(con, COLUMNS, rows, drop=DROP, same=("team",))
    return con.file.getvalue().splitlines()


def _header(lines: list[str]) -> list[str]:
    return [c.strip() for c in lines[1].strip("┃").split("┃")]


@pytest.mark.parametrize("width", [80, 120], ids=["at 80 columns", "at 120 columns, where the reason still wrapped"])
def test_blank_columns_and_a_team_column_of_one_team_go_first_and_the_line_under_says_the_team(width):
    lines = _shown(width, _failed(8))
    assert _header(lines) == ["id", "name", "state", "spent", "budget", "reason"], lines
    assert all(len(line) <= width for line in lines), lines
    assert len(lines) <= 8 * 4 + 5, "\n".join(lines)  # 98 lines at 80 columns before: at most 4 a job now
    assert lines[-1] == "(every team default; piped or --json: all)", lines


def test_a_team_column_of_several_teams_is_kept_while_it_fits_and_blank_columns_still_go():
    lines = _shown(120, _failed(8, team=lambda i: "vision" if i % 2 else "nlp"))
    assert _header(lines) == ["id", "name", "team", "state", "spent", "budget", "reason"], lines
    assert not any("every team" in line for line in lines), lines


def test_a_table_that_fits_whole_keeps_every_column():
    lines = _shown(200, _failed(8))
    assert _header(lines) == ["id", "name", "team", "state", "queue", "starts ~", "spent", "budget", "reason"], lines
    assert not any("piped or --json" in line for line in lines), lines
