"""SkyPilot's SDK sends a POST /launch answered 503 again by itself (``rest.request``, up to 600 s). Envoy answers 503
when the upstream reset after it got the request (a rolling update): the first send may have been taken. A 4xx to the
retry (the new replica's version check, a rate limit) then says nothing of it, and the launch stays awaited: taken for
refused, the attempt was launched again after the backoff, twice."""

from __future__ import annotations

import json

from test_skypilot_launch_refused import AID, TOO_OLD, ScriptedRoutes, as_json, scripted, state_of  # noqa: F401
from test_skypilot_local_failures import TASK, launcher, remote  # noqa: F401
from test_skypilot_task import ONDEMAND_CPU, request

import pytest
from launchers.base import LaunchError


class SequencedRoutes(ScriptedRoutes):
    def do_POST(self):
        path = self.path.split("?")[0]
        if path == "/launch" and isinstance(self.server.launch, list):
            sent = json.loads(self._body())
            if sent.get("dryrun"):
                self._answer(200, None, {"X-Skypilot-Request-ID": "dry-1"})
                return
            self.server.answered.append(sent)
            self._raw(*self.server.launch.pop(0))
            return
        super().do_POST()


def test_a_launch_answered_503_then_a_4xx_on_the_sdks_retry_is_still_awaited(launcher, scripted):  # noqa: F811
    scripted.RequestHandlerClass = SequencedRoutes
    scripted.launch = [(503, ("text/plain", "upstream connect error or disconnect/reset before headers")),
                       (400, as_json({"error": "version_mismatch", "message": TOO_OLD})),
                       (400, as_json({"error": "version_mismatch", "message": TOO_OLD}))]
    try:
        launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    except LaunchError:
        pass
    assert len(scripted.answered) == 2  # the SDK sent it twice already (its own 503 retry)
    assert "sent_at" in state_of(launcher), "the first POST may have been taken, yet the launch is not awaited"
