"""A self-signed certificate for an operator's metrics endpoint, made in a child process.

Making one needs the cryptography package, about 12 MiB resident once imported, and an operator makes one
certificate at start and never again: `made_apart` runs `python -m capfleet.selfsigned` for it, so the
operator itself never imports cryptography (unless something it calls does: paramiko, pyghmi). The key
travels back over the child's stdout pipe, never through a file another process could read.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import subprocess
import sys

CHILD_TIMEOUT_SECONDS = 60


def certificate(names: list[str]) -> tuple[bytes, bytes]:
    """A certificate (PEM) and its key for `names` (DNS names or IP addresses), valid for a year."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    alternative: list[x509.GeneralName] = []
    for name in names:
        try:
            alternative.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternative.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def made_apart(names: list[str]) -> tuple[bytes, bytes]:
    """`certificate(names)`, made by a child Python process."""
    child = subprocess.run(
        [sys.executable, "-m", __name__, *names],
        capture_output=True,
        check=True,
        timeout=CHILD_TIMEOUT_SECONDS,
    )
    made = json.loads(child.stdout)
    return made["certificate"].encode(), made["key"].encode()


def main(names: list[str]) -> None:
    cert, key = certificate(names)
    json.dump({"certificate": cert.decode(), "key": key.decode()}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
