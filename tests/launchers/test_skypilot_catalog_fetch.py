"""SkyPilot failing to download a cloud's price catalog (a host with no way to GitHub) is said as that, not as an API
server that cannot be reached — the server was up, and the operator was sent to look at it."""

from __future__ import annotations

import pytest


def test_a_catalog_download_that_fails_is_named_with_where_to_put_the_catalog(sky):
    import requests

    from launchers.skypilot import api_refusal

    exc = requests.ConnectionError(
        "HTTPSConnectionPool(host='raw.githubusercontent.com', port=443): Max retries exceeded with url: "
        "/skypilot-org/skypilot-catalog/master/catalogs/v8/aws/vms.csv (Caused by NameResolutionError(...))")
    refused = api_refusal(exc, "a request made before the launch was sent")
    assert refused is not None and not refused.permanent
    said = str(refused)
    assert said.startswith("SkyPilot could not download its price catalog (")
    assert "~/.sky/catalogs/v8" in said and "cannot be reached" not in said


@pytest.mark.parametrize("message", [
    pytest.param("HTTPConnectionPool(host='127.0.0.1', port=46580): Max retries exceeded with url: /api/health",
                 id="the API server itself refusing connections is still said as that"),
])
def test_other_connection_errors_still_name_the_api_server(sky, message):
    import requests

    from launchers.skypilot import api_refusal

    refused = api_refusal(requests.ConnectionError(message), "the dry run of the launch")
    assert refused is not None and "SkyPilot's API server cannot be reached" in str(refused)
