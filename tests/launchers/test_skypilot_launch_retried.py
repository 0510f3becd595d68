"""A POST /launch answered 503 may have been taken: Envoy answers 503 when the upstream reset after it got the request
(a rolling update). SkyPilot's SDK sent it again by itself (``rest.request``, for up to 600 s, inside the engine's
tick), and a 4xx to that second send (the new replica's version check, a rate limit) said nothing of the first. The
launcher's calls now send each request once (``launchers.skypilot._send_once_on_503``): the launch is awaited as one
that may have been sent, never sent again while it may show up, and no call holds the tick for SkyPilot's retries.
The fake API server (``SequencedRoutes``) is test_skypilot_launch_refused's loopback fake, answering each real launch
as scripted."""

from __future__ import annotations

import json

from test_skypilot_launch_refused import AID, TOO_OLD, ScriptedRoutes, as_json, scripted, state_of  # noqa: F401
from test_skypilot_local_failures import TASK, launcher, remote  # noqa: F401
from test_skypilot_task import ONDEMAND_CPU, request


class SequencedRoutes(ScriptedRoutes):
    """The loopback fake API server's routes answering each real ``POST /launch`` with the next scripted answer."""

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


def test_a_launch_answered_503_is_sent_once_and_awaited_never_sent_again_while_it_may_show_up(
        launcher, scripted):  # noqa: F811
    scripted.RequestHandlerClass = SequencedRoutes
    scripted.launch = [(503, ("text/plain", "upstream connect error or disconnect/reset before headers")),
                       (400, as_json({"error": "version_mismatch", "message": TOO_OLD})),
                       (200, ("application/json", "null"))]
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))  # no error: awaited as pending
    assert len(scripted.answered) == 1, "SkyPilot sent the launch again by itself after its 503"
    assert "sent_at" in state_of(launcher), "the first POST may have been taken, yet the launch is not awaited"
    launcher.launch(request(TASK, ONDEMAND_CPU, attempt_id=AID))
    assert len(scripted.answered) == 1, "sent again while the first may still show up"
