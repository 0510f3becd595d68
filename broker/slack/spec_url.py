"""Which task URLs Slack's ``submit <url>`` may fetch, and fetching one without being steered inward.

A Slack user mapped to a team can ask the broker to fetch a URL. The broker sits inside the
company's network, so a URL naming an internal service (a metadata endpoint, an admin console on
``https://10.0.0.5``) would make it a proxy into that network. Two rules close that:

* A prefix in ``slack.spec_url_prefixes`` is matched by URL part, not by text: scheme, host and
  port must be equal and the path must be in the prefix's path, folder by folder. (By text, the prefix
  ``https://git.example.com`` also admitted ``https://git.example.com.evil.net/`` and
  ``https://git.example.com@10.0.0.5/``.) A URL with a user name or password is refused, and one whose
  path has a ``.`` or ``..`` segment (``%2E`` too) or an escaped slash: fetched, ``/org/../admin`` is ``/admin``.
* A prefix that names a host is the admin's choice and is trusted, wherever that host is. A
  prefix that is only a scheme (the default, ``https://``) admits public hosts only: every address
  the name resolves to must be global, and the request goes to the address that was checked (the
  name is kept for the ``Host`` header and TLS), so DNS cannot answer differently in between.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

import httpx

DEFAULT_PORTS = {"http": 80, "https": 443}

Resolver = Callable[[str, int], list[str]]
"""``(host, port) → the IP addresses the name resolves to``."""


class SpecURLRefused(ValueError):
    """The URL is not one the config lets the broker fetch, or could not be fetched; the message says why."""


@dataclass(frozen=True)
class Permit:
    url: SplitResult
    host_named: bool  # admitted by a prefix that names this host (trusted), not by a bare scheme


def _parts(url: str) -> SplitResult:
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises ValueError on a port out of range or not a number
    except ValueError:
        raise SpecURLRefused(f"{url} is not a valid URL") from None
    return parts


def _port(parts: SplitResult) -> int | None:
    return parts.port or DEFAULT_PORTS.get(parts.scheme.lower())


def permit(url: str, prefixes: Iterable[str]) -> Permit:
    """Check ``url`` against the configured prefixes; raise :class:`SpecURLRefused` naming why not."""
    prefixes = tuple(prefixes)
    allowed = ", ".join(prefixes) or "none: set slack.spec_url_prefixes"
    parts = _parts(url)
    if parts.scheme.lower() not in DEFAULT_PORTS or not parts.hostname:
        raise SpecURLRefused(f"{url} is not an http(s) URL (allowed: {allowed})")
    if parts.username is not None or parts.password is not None:
        raise SpecURLRefused(f"{url} carries a user name or password, which the broker does not send")
    if any(s in (".", "..") or "/" in s or "\\" in s for s in map(unquote, parts.path.split("/"))):
        # httpx, and servers decoding %2E and %2F, take /org/../admin for /admin: outside a prefix /org/
        raise SpecURLRefused(f"{url} has a dot segment (. or ..) or an escaped slash in its path, which the broker "
                             "does not fetch: give the path as it is")
    bare_scheme = False
    for prefix in prefixes:
        p = _parts(prefix)
        if p.scheme.lower() != parts.scheme.lower():
            continue
        if not p.netloc:
            bare_scheme = True
            continue
        if (p.hostname or "").lower() == parts.hostname.lower() and _port(p) == _port(parts) \
                and _under(parts.path, p.path):
            return Permit(parts, host_named=True)
    if bare_scheme:
        return Permit(parts, host_named=False)
    raise SpecURLRefused(f"{url} is not allowed (allowed: {allowed})")


def _under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix``'s or in it, folder by folder (``/org`` holds ``/org/t.yaml``, not
    ``/org-evil/t.yaml``); a prefix ending in ``/`` or not says the same folder."""
    want = prefix.split("/")
    if want[-1] == "":
        want.pop()
    return path.split("/")[:len(want)] == want


_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052's well-known prefix: the IPv4 address is the last 32 bits
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: a network's own translators, never public
_EMBEDDING = (ipaddress.ip_network("::/96"), ipaddress.ip_network("::ffff:0:0:0/96"))  # IPv4-compatible; SIIT


def _public(address: str) -> bool:
    """Whether ``address`` is a public one. An IPv6 address that carries an IPv4 one (mapped, NAT64, 6to4,
    IPv4-compatible, SIIT) is judged by that IPv4 address: ``64:ff9b::a00:5`` reaches 10.0.0.5 through the
    network's NAT64 gateway, and Python calls it global."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL or ip.teredo is not None:
            return False
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip.sixtofour is not None:
            ip = ip.sixtofour
        elif ip in _NAT64 or any(ip in net for net in _EMBEDDING):
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.is_global and not ip.is_multicast


def system_resolver(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise SpecURLRefused(f"could not resolve {host}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def fetch(url: str, prefixes: Iterable[str], *, max_bytes: int, timeout: float = 10,
          resolve: Resolver = system_resolver, public: Callable[[str], bool] = _public) -> str:
    """The body of ``url`` as text, at most ``max_bytes``, all of it within ``timeout`` seconds (httpx's own timeout
    holds each read: a server sending a byte every few seconds held a broker thread for as long as it liked);
    :class:`SpecURLRefused` with the reason otherwise."""
    p = permit(url, prefixes)
    target, headers, extensions = p.url.geturl(), {}, {}
    if not p.host_named:
        host, port = p.url.hostname, _port(p.url)
        addresses = resolve(host, port)
        inward = [a for a in addresses if not public(a)]
        if not addresses or inward:
            raise SpecURLRefused(
                f"{url}: {host} is {'an address' if host in addresses else 'a name for ' + ', '.join(inward)} "
                "inside a private, loopback or link-local network; only hosts named in "
                "slack.spec_url_prefixes may be fetched there")
        ip = addresses[0].split("%", 1)[0]
        pinned = f"[{ip}]" if ":" in ip else ip
        target = p.url._replace(netloc=f"{pinned}:{port}").geturl()
        headers["Host"] = p.url.netloc
        if p.url.scheme.lower() == "https":
            extensions["sni_hostname"] = host  # TLS and its certificate check still use the name
    until = time.monotonic() + timeout
    try:
        with httpx.Client(timeout=timeout, follow_redirects=False) as client, \
                client.stream("GET", target, headers=headers, extensions=extensions) as resp:
            if resp.status_code != 200:
                raise SpecURLRefused(f"{url} answered HTTP {resp.status_code}")
            body = bytearray()
            for chunk in resp.iter_bytes():
                body.extend(chunk)
                if len(body) > max_bytes:
                    raise SpecURLRefused(f"{url} is larger than {max_bytes} bytes")
                if time.monotonic() > until:
                    raise SpecURLRefused(f"{url} took more than {timeout:g} s to send its {len(body)} bytes so far")
    except httpx.HTTPError as exc:
        raise SpecURLRefused(f"could not fetch {url}: {exc}") from None
    return body.decode("utf-8", "replace")
