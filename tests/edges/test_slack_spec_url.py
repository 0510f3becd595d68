"""Slack's ``submit <url>``: which URLs the broker fetches, and that a bare ``https://`` cannot reach inward.

The spec server is the Slack stub on 127.0.0.1; a host name the test resolves itself stands in
for DNS, so nothing leaves loopback.
"""

from __future__ import annotations

import pytest

from broker.slack.spec_url import SpecURLRefused, fetch, permit

from .fakes import SlackStub


@pytest.fixture
def stub():
    s = SlackStub()
    s.files["/specs/t.yaml"] = "name: from-url\nrun: echo hi\n"
    yield s
    s.close()


@pytest.mark.parametrize("url, prefixes, reason", [
    ("https://git.example.com.evil.net/t.yaml", ["https://git.example.com"], "not allowed"),
    ("https://git.example.com@10.0.0.5/t.yaml", ["https://git.example.com"], "user name or password"),
    ("https://git.example.com:8443/org/t.yaml", ["https://git.example.com/org/"], "not allowed"),
    ("https://git.example.com/other/t.yaml", ["https://git.example.com/org/"], "not allowed"),
    ("https://git.example.com/org/../admin/t.yaml", ["https://git.example.com/org/"], "dot segment"),
    ("https://git.example.com/org/%2E%2e/admin/t.yaml", ["https://git.example.com/org/"], "dot segment"),
    ("https://git.example.com/org/..%2Fadmin/t.yaml", ["https://git.example.com/org/"], "dot segment"),
    ("https://git.example.com/org-evil/t.yaml", ["https://git.example.com/org"], "not allowed"),
    ("http://git.example.com/org/t.yaml", ["https://git.example.com/org/"], "not allowed"),
    ("file:///etc/passwd", ["https://"], "not an http(s) URL"),
    ("https://", ["https://"], "not an http(s) URL"),
    ("https://git.example.com:99999/t.yaml", ["https://"], "not a valid URL"),
], ids=[
    "a host that only begins with the prefix's host is refused",
    "a user name before @ cannot smuggle another host past a prefix",
    "another port on the prefix's host is refused",
    "a path outside the prefix's path is refused",
    "a .. segment cannot climb out of the prefix's path (httpx fetches /admin/t.yaml)",
    "nor a .. written %2E%2e, which servers decode",
    "nor a ../ with its slash written %2F",
    "a folder that only begins with the prefix's last folder is refused",
    "http is refused where only https is allowed",
    "a file URL is refused",
    "a URL without a host is refused",
    "a port out of range is refused as an invalid URL",
])
def test_a_url_outside_the_prefixes_is_refused_naming_why(url, prefixes, reason):
    with pytest.raises(SpecURLRefused, match=reason.replace("(", r"\(").replace(")", r"\)")):
        permit(url, prefixes)


@pytest.mark.parametrize("url, prefixes, named", [
    ("https://git.example.com/org/t.yaml", ["https://git.example.com/org/"], True),
    ("https://GIT.example.com:443/org/t.yaml", ["https://git.example.com/org/"], True),
    ("https://anything.example.org/t.yaml", ["https://"], False),
    ("https://git.example.com/org/sub/t.yaml", ["https://git.example.com/org"], True),
], ids=[
    "a URL under a prefix that names its host is trusted",
    "host case and the default port do not matter",
    "a bare scheme admits any host, to be checked as public before the fetch",
    "a prefix without its last slash admits what is in that folder",
])
def test_a_url_under_a_prefix_is_admitted(url, prefixes, named):
    assert permit(url, prefixes).host_named is named


def test_a_prefix_naming_a_loopback_host_is_the_admins_choice_and_is_fetched(stub):
    assert "from-url" in fetch(stub.url + "/specs/t.yaml", [stub.url + "/specs/"], max_bytes=10_000)


@pytest.mark.parametrize("addresses", [
    ["127.0.0.1"], ["10.0.0.5"], ["169.254.169.254"], ["::1"], ["fd00::1"], ["::ffff:127.0.0.1"],
    ["93.184.216.34", "192.168.1.10"], ["64:ff9b::a00:5"], ["64:ff9b::a9fe:a9fe"], ["64:ff9b:1::808:808"],
    ["2002:a00:5::1"], ["::a00:5"], ["::ffff:0:a00:5"], ["2001:0:4136:e378:8000:63bf:f5ff:fffa"],
], ids=["loopback", "a private network", "the cloud metadata address", "IPv6 loopback", "IPv6 unique local",
        "loopback written as IPv4-mapped IPv6", "a name with one public and one private address",
        "a private network through NAT64", "the metadata address through NAT64", "a local-use NAT64 prefix",
        "a private network in a 6to4 address", "a private network as IPv4-compatible IPv6",
        "a private network as SIIT IPv4-translated IPv6", "a Teredo tunnel"])
def test_a_bare_scheme_prefix_refuses_a_host_that_resolves_inward_and_sends_nothing(stub, addresses):
    host, port = "specs.test", stub.port
    with pytest.raises(SpecURLRefused, match="only hosts named in slack.spec_url_prefixes"):
        fetch(f"http://{host}:{port}/specs/t.yaml", ["http://"], max_bytes=10_000,
              resolve=lambda h, p: addresses)
    with pytest.raises(SpecURLRefused, match="only hosts named"):  # an address written in the URL is checked too
        fetch(f"http://127.0.0.1:{port}/specs/t.yaml", ["http://"], max_bytes=10_000)
    assert stub.gets == []


def test_a_public_host_is_fetched_from_the_address_that_was_checked_with_its_name_kept(stub):
    # "specs.test" resolves nowhere but here: the fetch can only succeed by connecting to the address the
    # check saw, while the server is still told the name it was asked for.
    seen = []

    def resolve(host, port):
        seen.append((host, port))
        return ["127.0.0.1"]

    body = fetch(f"http://specs.test:{stub.port}/specs/t.yaml", ["http://"], max_bytes=10_000,
                 resolve=resolve, public=lambda a: True)
    assert "from-url" in body
    assert seen == [("specs.test", stub.port)]
    assert stub.gets == [("/specs/t.yaml", f"specs.test:{stub.port}")]


def test_a_body_over_the_limit_is_refused(stub):
    stub.files["/specs/big.yaml"] = "x" * 5000
    with pytest.raises(SpecURLRefused, match="larger than 1000 bytes"):
        fetch(stub.url + "/specs/big.yaml", [stub.url + "/specs/"], max_bytes=1000)


@pytest.mark.parametrize("address", ["93.184.216.34", "64:ff9b::5db8:d822", "2002:5db8:d822::1", "2606:4700::1111"],
                         ids=["public IPv4", "public IPv4 through NAT64", "public IPv4 in 6to4", "public IPv6"])
def test_a_public_address_however_written_is_public(address):
    from broker.slack.spec_url import _public

    assert _public(address)


def test_a_server_dripping_its_body_is_cut_off_at_the_timeout_for_the_whole_fetch():
    """httpx's timeout holds each read: a server sending a byte every 0.3 s held a broker thread for as long as it
    kept sending (a 1 MB limit at that pace: days). The whole fetch is held to the timeout."""
    import socket
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def drip():
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
            while not stop.is_set():
                try:
                    conn.sendall(b"x")
                except OSError:
                    return
                time.sleep(0.3)

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/specs/slow.yaml"
    started = time.monotonic()
    try:
        with pytest.raises(SpecURLRefused, match=r"took more than 1 s to send its \d+ bytes so far"):
            fetch(url, [f"http://127.0.0.1:{port}/specs/"], max_bytes=1000, timeout=1)
        assert time.monotonic() - started < 5
    finally:
        stop.set()
        listener.close()
        thread.join(5)
