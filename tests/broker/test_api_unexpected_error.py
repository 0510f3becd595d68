"""An unexpected error (a bug) is a 500 with a sentence, and the client's next request on the same connection works.

Starlette sends the exception handler's answer and then raises the error again, and uvicorn drops the connection
after it: a client that kept the connection alive (httpx, the CLI's `BrokerClient`, any script) met "connection
reset by peer" on its next request, and read a broker that works as one that went away. The 500 now says
`Connection: close`, so the client opens a new connection. Real uvicorn over `broker serve`'s own listener."""

from __future__ import annotations

import httpx
from test_serve_socket import served

from broker.api.app import create_app
from broker.config import load_settings


def test_a_500_closes_its_connection_and_the_next_request_on_the_client_is_answered(tmp_path):
    app = create_app(load_settings({"BROKER_DATA_DIR": str(tmp_path), "BROKER_ADMIN_TOKEN": "adm"}), engine=False)

    @app.post("/v1/test-bug")
    def bug():  # a bug in a route, as the year-0 deadline of test_broker_spec was
        raise RuntimeError("a bug")

    with served(app, log_level="critical") as (_, url):
        with httpx.Client(base_url=url, timeout=10, headers={"Authorization": "Bearer adm"}) as client:
            for _ in range(3):
                failed = client.post("/v1/test-bug", json={})
                assert failed.status_code == 500 and "unexpected error" in failed.json()["detail"]
                assert failed.headers["connection"] == "close"
                assert client.get("/v1/healthz").status_code == 200, "the next request on the client failed"
