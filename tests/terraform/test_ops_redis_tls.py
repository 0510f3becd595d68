"""The GCP module's BROKER_STORE_URL reaches a Redis whose TLS certificate is built as Memorystore's is.

Memorystore's server certificate names the instance's IP in its subject CN only, with no IP subjectAltName
(envoyproxy/ratelimit#409: "GCP Memorystore which sets the CN to an IP address"). OpenSSL matches an IP host
against IP subjectAltNames alone, and redis-py checks the host by default since 6.0 (redis-py#3629), so the URL
with ``ssl_ca_certs`` alone failed every connection: "CERTIFICATE_VERIFY_FAILED ... IP address mismatch". Here a
real redis-server serves such a certificate (signed by a CA of the test's own, as Memorystore signs with the
instance's) and the broker's own store opens the module's URL, as rendered by Terraform for that server.
"""

from __future__ import annotations

import datetime
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from hcl_model import cached_module, unquote
from terraform_paths import TERRAFORM
from testports import free_port

GCP = TERRAFORM / "gcp"
HOST = "127.0.0.1"
AUTH = "memorystore-auth-string"


def _write_memorystore_like_certificates(folder: Path) -> None:
    """ca.pem, and server.pem/server.key: CN = the IP, no subjectAltName, signed by the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Google Cloud Memorystore Redis Server CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(days=1))
              .sign(ca_key, hashes.SHA256()))
    assert not [e for e in server.extensions if isinstance(e.value, x509.SubjectAlternativeName)]
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


@pytest.fixture
def tls_redis(tmp_path):
    """A redis-server with AUTH and TLS only (as Memorystore's SERVER_AUTHENTICATION mode), on a free port."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed (make test installs it)"
    certs = tmp_path / "redis-ca"
    certs.mkdir()
    _write_memorystore_like_certificates(certs)
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", "0", "--tls-port", str(port), "--bind", HOST, "--dir", str(tmp_path),
         "--tls-cert-file", str(certs / "server.pem"), "--tls-key-file", str(certs / "server.key"),
         "--tls-ca-cert-file", str(certs / "ca.pem"), "--tls-auth-clients", "no", "--requirepass", AUTH,
         "--save", "", "--logfile", str(tmp_path / "redis.log")])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((HOST, port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "redis.log").read_text()
                time.sleep(0.05)
        yield port, certs
    finally:
        proc.kill()
        proc.wait()


def module_store_url(port: int, ca_dir: Path) -> str:
    """BROKER_STORE_URL as Terraform renders it for a Memorystore instance at HOST:port, its CA in ca_dir."""
    module = cached_module(GCP)
    url = unquote(module.locals["secret_values"]["BROKER_STORE_URL"])
    values = {"google_redis_instance.store.auth_string": AUTH, "google_redis_instance.store.host": HOST,
              "google_redis_instance.store.port": str(port), "local.redis_ca_dir": str(ca_dir)}
    for _ in range(3):  # a local may name other locals
        url = re.sub(r"\$\{local\.(redis_\w+)\}",
                     lambda m: str(ca_dir) if m.group(1) == "redis_ca_dir" else unquote(module.locals[m.group(1)]), url)
        url = re.sub(r"\$\{([\w.]+)\}", lambda m: values.get(m.group(1), m.group(0)), url)
    assert "${" not in url, url
    assert url.startswith("rediss://"), url
    return url


def test_the_broker_opens_the_gcp_store_url_on_a_certificate_with_the_ip_in_its_cn_only(tls_redis):
    from broker.store import open_store

    port, ca_dir = tls_redis
    store = open_store(module_store_url(port, ca_dir))
    try:
        assert store.ping()
        assert store.get_job("j-0000000000") is None
    finally:
        store.close()


def test_the_certificate_is_still_verified_against_the_mounted_ca(tls_redis, tmp_path):
    """ssl_check_hostname=false leaves the chain checked: a CA other than the instance's is refused."""
    import redis

    port, ca_dir = tls_redis
    other = tmp_path / "other-ca"
    other.mkdir()
    _write_memorystore_like_certificates(other)
    client = redis.Redis.from_url(module_store_url(port, other), socket_timeout=5)
    with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        client.ping()
    client.close()
