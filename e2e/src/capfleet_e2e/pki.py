"""Certificates and keys for the test control plane, generated fresh for every test session.

Nothing secret is ever committed: the harness creates a CA, the kube-apiserver's serving certificate and
the service-account signing key pair at start, in a private temporary directory, with 0600 files.
`CertificateAuthority` is the same CA code for every other test server that needs TLS: Cluster API's
webhooks (capfleet_e2e.capi) and the stand-in workload API servers with their cluster CA
(capfleet_e2e.workload).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVING_DNS_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
POD_NETWORK_GATEWAY = "172.31.0.1"
"""The management node's address on its pods' bridge (mgmtnode.py): where pods reach the lab's services
(the API server, hypervisors, NetBox, the BMCs), so the lab's serving certificates name it too. It exists
only inside the node's network namespace."""
# Loopback, the first address of the service range, and the pods' gateway.
SERVING_IPS = ("127.0.0.1", "10.0.0.1", POD_NETWORK_GATEWAY)
_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class Pki:
    """Paths of the generated PEM files."""

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_private_key: Path
    sa_public_key: Path


def write_private(path: Path, data: bytes) -> Path:
    """Write `data` to a new file readable only by its owner (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA kept in memory that issues serving and client certificates (for any test server or user)."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def generate(cls, common_name: str = "capfleet-test-ca") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name(common_name)
        cert = (
            _builder(name, name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
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
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        """A CA from PEM (an EC key, as `generate` makes)."""
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"expected an EC private key, got {type(key).__name__}")
        return cls(key, x509.load_pem_x509_certificate(cert_pem))

    @property
    def cert_pem(self) -> bytes:
        return _cert_pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self.key)

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: Sequence[x509.GeneralName] = (),
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(subject, self.cert.subject, key.public_key()).add_extension(
            x509.BasicConstraints(ca=False, path_length=None), critical=True
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        cert = (
            builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        return _cert_pem(cert), _key_pem(key)

    def issue_serving(
        self, common_name: str, dns_names: Sequence[str] = (), ips: Sequence[str] = ()
    ) -> tuple[bytes, bytes]:
        """A TLS server certificate for those names and addresses: `(cert_pem, key_pem)`."""
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        return self._issue(_name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def issue_client(self, common_name: str, organizations: Sequence[str] = ()) -> tuple[bytes, bytes]:
        """A TLS client certificate (Kubernetes: user `common_name` in groups `organizations`)."""
        return self._issue(_name(common_name, organizations), ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_key_pair() -> tuple[bytes, bytes]:
    """A fresh RSA key pair for signing service-account tokens: `(private_pem, public_pem)`."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public


def generate_pki(directory: Path) -> Pki:
    """Create the CA, the apiserver serving pair and the service-account key pair in `directory`."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = CertificateAuthority.generate()
    serving_cert, serving_key = ca.issue_serving("kube-apiserver", SERVING_DNS_NAMES, SERVING_IPS)
    sa_key, sa_pub = service_account_key_pair()
    return Pki(
        ca_cert=write_private(directory / "ca.crt", ca.cert_pem),
        ca_key=write_private(directory / "ca.key", ca.key_pem),
        serving_cert=write_private(directory / "apiserver.crt", serving_cert),
        serving_key=write_private(directory / "apiserver.key", serving_key),
        sa_private_key=write_private(directory / "sa.key", sa_key),
        sa_public_key=write_private(directory / "sa.pub", sa_pub),
    )
