"""TLS as RocketMQ 4.x's remoting has it (`TlsSystemConfig`, `TlsHelper`, the server's handshake
sniffer): a server in mode `disabled` speaks plain TCP only, `permissive` (Java's default) takes plain
and TLS clients on one port, telling them apart by the first byte (0x16 starts a TLS handshake),
and `enforcing` closes plain clients. In test mode (`tls.test.mode.enable`, Java's default) a server
without a certificate of its own makes a self-signed one, and clients do not check the server's
certificate unless `tls.client.authServer` is set — Java's behaviour, convenient and not secure.

The keys are Java's system properties (`tls.server.mode`, `tls.server.certPath`, ...); ferromq
reads them from broker.conf, and from the properties file `tls.config.file` names
(/etc/rocketmq/tls.properties by default, read when it exists), which wins as in Java."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from ferromq.errors import FerroMQError

logger = logging.getLogger(__name__)

HANDSHAKE_FIRST_BYTE = 0x16
"""A TLS record of type handshake: what a ClientHello starts with."""

DEFAULT_CONFIG_FILE = "/etc/rocketmq/tls.properties"


class TlsConfigError(FerroMQError):
    """The TLS settings cannot make a context (bad mode, missing or unreadable files)."""


class TlsMode(StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


# Java's property name of each field (TlsSystemConfig).
PROPERTY_OF = {
    "mode": "tls.server.mode",
    "test_mode_enable": "tls.test.mode.enable",
    "need_client_auth": "tls.server.need.client.auth",
    "key_path": "tls.server.keyPath",
    "key_password": "tls.server.keyPassword",
    "cert_path": "tls.server.certPath",
    "auth_client": "tls.server.authClient",
    "trust_cert_path": "tls.server.trustCertPath",
    "client_key_path": "tls.client.keyPath",
    "client_key_password": "tls.client.keyPassword",
    "client_cert_path": "tls.client.certPath",
    "client_auth_server": "tls.client.authServer",
    "client_trust_cert_path": "tls.client.trustCertPath",
}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}


class PlaneTls(NamedTuple):
    """What the Rust data plane serves TLS with (`_store.DataPlane(tls=...)`)."""

    mode: str
    """permissive or enforcing."""
    cert_pem: bytes
    key_pem: bytes
    """Not encrypted (a key with a password is decrypted here)."""
    client_auth: str
    """none, optional or require."""
    trust_pem: bytes | None


@dataclass(frozen=True)
class TlsSettings:
    """A process's TLS settings, with Java's defaults: how its server serves TLS clients and, for
    its own outgoing connections (a broker's to name servers and its master), how it connects."""

    mode: TlsMode = TlsMode.PERMISSIVE
    test_mode_enable: bool = True
    need_client_auth: str = "none"
    """Ask clients for a certificate: none, optional or require (checked against trust_cert_path)."""
    key_path: str | None = None
    key_password: str | None = None
    cert_path: str | None = None
    auth_client: bool = False
    trust_cert_path: str | None = None
    client_key_path: str | None = None
    client_key_password: str | None = None
    client_cert_path: str | None = None
    """The certificate presented to servers that ask for one (not in test mode, as Java)."""
    client_auth_server: bool = False
    """Check the server's certificate (against client_trust_cert_path, else the system's CAs)."""
    client_trust_cert_path: str | None = None

    @classmethod
    def from_properties(cls, props: dict[str, str], base: TlsSettings | None = None) -> TlsSettings:
        """`base` with the values of Java's property names found in `props`."""
        values = dataclasses.asdict(base or cls())
        for field, key in PROPERTY_OF.items():
            if key not in props:
                continue
            raw = props[key].strip()
            if field == "mode":
                values[field] = parse_mode(raw)
            elif field in ("test_mode_enable", "auth_client", "client_auth_server"):
                values[field] = raw.lower() == "true"  # Java's Boolean.parseBoolean
            else:
                values[field] = raw or None
        return cls(**values)

    def problems(self) -> list[tuple[str, str]]:
        """(property, problem) for each setting that cannot work."""
        out = []
        if self.need_client_auth.lower() not in _CLIENT_AUTH:
            out.append((PROPERTY_OF["need_client_auth"], "must be none, optional or require"))
        elif (
            self.need_client_auth.lower() != "none" and not self.trust_cert_path and not self.test_mode_enable
        ):
            out.append(
                (PROPERTY_OF["trust_cert_path"], "is needed to check the certificates clients are asked for")
            )
        if (self.cert_path is None) != (self.key_path is None):
            out.append((PROPERTY_OF["cert_path"], "and tls.server.keyPath go together"))
        if (self.client_cert_path is None) != (self.client_key_path is None):
            out.append((PROPERTY_OF["client_cert_path"], "and tls.client.keyPath go together"))
        for field in ("key_path", "cert_path", "trust_cert_path", "client_key_path", "client_cert_path"):
            path = getattr(self, field)
            if path is not None and not os.path.isfile(path):
                out.append((PROPERTY_OF[field], f"names no readable file: {path}"))
        return out

    def server_context(self) -> ssl.SSLContext:
        """The context TLS clients are served with. Raises `TlsConfigError` saying why not."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if self.cert_path and self.key_path:
            _load_chain(ctx, self.cert_path, self.key_path, self.key_password)
        elif self.test_mode_enable:
            cert, key = _self_signed()
            # ssl loads a chain from files only: they live as long as this call.
            with tempfile.TemporaryDirectory(prefix="ferromq-tls-") as folder:
                cert_file, key_file = Path(folder, "cert.pem"), Path(folder, "key.pem")
                cert_file.write_bytes(cert)
                key_file.write_bytes(key)
                ctx.load_cert_chain(cert_file, key_file)
        else:
            raise TlsConfigError(
                "TLS needs tls.server.certPath and tls.server.keyPath (or tls.test.mode.enable=true)"
            )
        auth = self.need_client_auth.lower()
        if auth != "none" and self.trust_cert_path:
            ctx.load_verify_locations(self.trust_cert_path)
            ctx.verify_mode = _CLIENT_AUTH[auth]
        return ctx

    def plane_tls(self) -> PlaneTls | None:
        """What the data plane serves TLS clients with: the configured files (checked by loading
        them as `server_context` does; a key with a password decrypted), or test mode's
        self-signed certificate. None in mode disabled. Raises `TlsConfigError` saying why not."""
        if self.mode == TlsMode.DISABLED:
            return None
        self.server_context()
        if self.cert_path and self.key_path:
            cert = _read(self.cert_path)
            key = _read(self.key_path)
            if self.key_password:
                key = _decrypted_key(key, self.key_password, self.key_path)
        else:
            cert, key = _self_signed()
        auth = self.need_client_auth.lower()
        trust = _read(self.trust_cert_path) if auth != "none" and self.trust_cert_path else None
        return PlaneTls(str(self.mode), cert, key, auth if trust is not None else "none", trust)

    def outgoing_context(self) -> ssl.SSLContext:
        """The context of this process's own TLS connections, as Java's client side builds it: in
        test mode no certificate of its own and none checked; otherwise the server's certificate
        is checked when tls.client.authServer, and tls.client.certPath is presented when set."""
        if self.test_mode_enable:
            return client_context()
        ctx = client_context(verify=self.client_auth_server, trust_cert_path=self.client_trust_cert_path)
        if self.client_cert_path and self.client_key_path:
            _load_chain(ctx, self.client_cert_path, self.client_key_path, self.client_key_password)
        return ctx


def _load_chain(ctx: ssl.SSLContext, cert_path: str, key_path: str, password: str | None) -> None:
    """The certificate and key `ctx` presents; `TlsConfigError` saying which files when it can't."""
    try:
        ctx.load_cert_chain(cert_path, key_path, password)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"cannot load {cert_path} / {key_path}: {e}") from e


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise TlsConfigError(f"cannot read {path}: {e}") from e


def _decrypted_key(pem: bytes, password: str, path: str) -> bytes:
    """The PKCS#8 PEM of an encrypted private key (the data plane takes keys in the clear, in
    memory only). Needs the `cryptography` package."""
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise TlsConfigError(
            "tls.server.keyPassword: decrypting the key needs the `cryptography` package "
            "(pip install 'ferromq[tls]')"
        ) from None
    try:
        key = serialization.load_pem_private_key(pem, password.encode())
    except (ValueError, TypeError) as e:
        raise TlsConfigError(f"cannot decrypt {path} with tls.server.keyPassword: {e}") from e
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def parse_mode(raw: str) -> TlsMode:
    try:
        return TlsMode(raw.strip().lower())
    except ValueError:
        raise TlsConfigError(
            f"tls.server.mode must be disabled, permissive or enforcing, not {raw!r}"
        ) from None


def read_properties_file(path: str) -> dict[str, str]:
    """The key=value lines of a Java properties file (comments and blank lines skipped); {} when
    the file does not exist."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise TlsConfigError(f"cannot read tls.config.file {path}: {e}") from e
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def client_context(verify: bool = False, trust_cert_path: str | None = None) -> ssl.SSLContext:
    """A client context as Java's `tls.enable=true` client makes by default: the server's
    certificate is not checked unless `verify` (then against `trust_cert_path` or the system's)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify:
        if trust_cert_path:
            ctx.load_verify_locations(trust_cert_path)
        else:
            ctx.load_default_certs()
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


_SELF_SIGNED: tuple[bytes, bytes] | None = None


def _self_signed() -> tuple[bytes, bytes]:
    """(cert, key) PEM of a self-signed certificate made once per process (test mode)."""
    global _SELF_SIGNED
    if _SELF_SIGNED is None:
        _SELF_SIGNED = self_signed_pem("ferromq test mode", days=365)
        logger.warning("TLS test mode: serving TLS clients with a self-signed certificate (not secure)")
    return _SELF_SIGNED


def self_signed_pem(
    common_name: str, ip_addresses: Sequence[str] = (), days: int = 365, since_days: int = 1
) -> tuple[bytes, bytes]:
    """(certificate, PKCS#8 key) PEM of a self-signed P-256 certificate that is its own CA, valid
    for `ip_addresses` (subject alternative names) from `since_days` ago to `days` from now (a
    negative `days`: expired). Needs the `cryptography` package."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise TlsConfigError(
            "TLS test mode makes a self-signed certificate with the `cryptography` package: "
            "pip install 'ferromq[tls]', or set tls.server.certPath and tls.server.keyPath"
        ) from None
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=since_days))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    )
    if ip_addresses:
        sans = [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(key, hashes.SHA256())
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key
