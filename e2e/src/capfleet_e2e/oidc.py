"""A real OpenID Connect issuer on loopback, for the console's OIDC sign-in.

Companies sign their people in to Kubernetes with an identity provider's ID tokens; the console accepts
whatever the API server accepts. This issuer serves what kube-apiserver fetches from one (the discovery
document and the signing keys, over HTTPS with a CA made for the run) and signs ID tokens (RS256) for
made-up users. `authentication_config` is the API server's structured authentication configuration that
trusts it, as an administrator writes it for their provider: users become `oidc:<email>`, their groups
`oidc:<group>`. Nothing here is a stand-in inside the API server: it verifies these tokens itself.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from capfleet_e2e.pki import CertificateAuthority, write_private

AUDIENCE = "capfleet-console"
PREFIX = "oidc:"
DISCOVERY_PATH = "/.well-known/openid-configuration"
KEYS_PATH = "/keys"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwk(key: rsa.RSAPublicKey, kid: str) -> dict[str, str]:
    """`key` as a JSON Web Key (RFC 7517) for RS256."""
    numbers = key.public_numbers()
    return {
        "kty": "RSA",
        "alg": "RS256",
        "use": "sig",
        "kid": kid,
        "n": b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
        "e": b64url(numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")),
    }


def signed_jwt(claims: dict[str, Any], key: rsa.RSAPrivateKey, kid: str) -> str:
    """A compact JWS (RFC 7515) of `claims`, signed RS256."""
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(signature)}"


class OidcIssuer:
    """An OIDC issuer on 127.0.0.1 (HTTPS) in a thread of its own; use as a context manager."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ca = CertificateAuthority.generate("capfleet-test-oidc-ca")
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:12]
        self.fetches: list[str] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def __enter__(self) -> Self:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        cert, key = self.ca.issue_serving("capfleet-test-oidc", ips=["127.0.0.1"])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(
            write_private(self.directory / "issuer.crt", cert),
            write_private(self.directory / "issuer.key", key),
        )
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.fetches.append(self.path)
                documents = {
                    DISCOVERY_PATH: issuer.discovery(),
                    KEYS_PATH: {"keys": [jwk(issuer.key.public_key(), issuer.kid)]},
                }
                body = json.dumps(documents[self.path]).encode() if self.path in documents else b""
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.url = f"https://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, name="oidc-issuer", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "jwks_uri": self.url + KEYS_PATH,
            "authorization_endpoint": self.url + "/authorize",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    def id_token(
        self,
        email: str,
        groups: list[str],
        *,
        audience: str = AUDIENCE,
        lifetime: float = 600,
        key: rsa.RSAPrivateKey | None = None,
    ) -> str:
        """An ID token for `email` in `groups`, valid for `lifetime` seconds (negative: expired), signed with
        the issuer's key unless `key` is given (a forgery the API server must refuse)."""
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": uuid.uuid5(uuid.NAMESPACE_URL, email).hex,
            "aud": audience,
            "iat": now - 5,
            "exp": now + int(lifetime),
            "email": email,
            "email_verified": True,
            "groups": groups,
        }
        return signed_jwt(claims, key or self.key, self.kid)

    def authentication_config(self) -> str:
        """kube-apiserver's `--authentication-config` that trusts this issuer's ID tokens for AUDIENCE."""
        config = {
            "apiVersion": "apiserver.config.k8s.io/v1beta1",
            "kind": "AuthenticationConfiguration",
            "jwt": [
                {
                    "issuer": {
                        "url": self.url,
                        "audiences": [AUDIENCE],
                        "certificateAuthority": self.ca.cert_pem.decode(),
                    },
                    "claimMappings": {
                        "username": {"claim": "email", "prefix": PREFIX},
                        "groups": {"claim": "groups", "prefix": PREFIX},
                    },
                }
            ],
        }
        return yaml.safe_dump(config)
