"""Checks every folder's tests share.

``sky`` may be imported in a test process only under tests/launchers, whose package fixture imports it with a HOME,
catalog and API-server port of its own (tests/launchers/conftest.py ``sky``). A test elsewhere that imports it (a
broker with ``launcher: skypilot`` checks each task with ``sky``) left it in ``sys.modules`` of its pytest-xdist
worker, and every tests/launchers test that worker ran later failed its setup ("sky was imported before its HOME
was set"): 104 errors, none of them naming the test at fault. This names it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

LAUNCHERS = Path(__file__).resolve().parent / "launchers"


@pytest.fixture(autouse=True)
def _sky_stays_in_the_launchers_tests(request):
    before = "sky" in sys.modules
    yield
    if before or "sky" not in sys.modules or LAUNCHERS in Path(request.node.path).resolve().parents:
        return
    pytest.fail(f"{request.node.nodeid} imported sky outside tests/launchers: run what needs it in a subprocess with "
                "a HOME of its own (tests/broker/test_local_disk_submit.py does), or move the test under "
                "tests/launchers and use its `sky` fixture", pytrace=False)
