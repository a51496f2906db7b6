"""The secure metrics endpoint's decisions, without a cluster: tokens, reviews, the answer cache, TLS.

Served for real, to a ServiceAccount RBAC allows and to ones it does not, in
e2e/tests/test_runtime_sample_operator.py.
"""

import ipaddress
import ssl
import subprocess
import sys
from pathlib import Path

from cryptography import x509

from capfleet import selfsigned
from capfleet.options import parse_options
from capfleet.securemetrics import (
    TokenCache,
    access_review,
    bearer_token,
    tls_context,
    token_review,
)


def test_only_a_bearer_token_counts() -> None:
    assert bearer_token({"Authorization": "Bearer abc.def"}) == "abc.def"
    assert bearer_token({"Authorization": "bearer abc"}) == "abc"
    assert bearer_token({"Authorization": "Basic dXNlcjpwYXNz"}) is None
    assert bearer_token({"Authorization": "Bearer "}) is None
    assert bearer_token({}) is None


def test_the_access_review_asks_for_get_on_metrics_as_the_authenticated_user() -> None:
    assert token_review("t")["spec"] == {"token": "t"}
    answer = {
        "status": {
            "authenticated": True,
            "user": {"username": "system:serviceaccount:monitoring:prometheus", "uid": "u1", "groups": ["g"]},
        }
    }
    review = access_review(answer)
    assert review is not None
    assert review["spec"] == {
        "user": "system:serviceaccount:monitoring:prometheus",
        "uid": "u1",
        "groups": ["g"],
        "extra": {},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    assert access_review({"status": {"authenticated": False}}) is None
    assert access_review({"status": {"authenticated": True, "user": {}}}) is None


def test_answers_are_cached_for_a_while_and_never_by_the_token_itself() -> None:
    now = [100.0]
    cache = TokenCache(seconds=60, clock=lambda: now[0])
    cache.put("secret-token", 200)
    assert cache.get("secret-token") == 200
    assert cache.get("other") is None
    assert "secret-token" not in repr(cache.__dict__)
    now[0] = 160.0
    assert cache.get("secret-token") is None
    cache.put("other", 403)
    assert len(cache.__dict__["_answers"]) == 1  # expired answers are dropped


def test_a_self_signed_certificate_names_hosts_and_addresses(tmp_path: Path) -> None:
    cert_pem, key_pem = selfsigned.made_apart(["capfleet-ipam-address-manager-0", "127.0.0.1"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["capfleet-ipam-address-manager-0"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    (tmp_path / "tls.crt").write_bytes(cert_pem)
    (tmp_path / "tls.key").write_bytes(key_pem)
    assert tls_context(str(tmp_path), []).minimum_version == ssl.TLSVersion.TLSv1_2
    assert isinstance(tls_context(None, ["localhost"]), ssl.SSLContext)


def test_plain_metrics_stay_on_loopback_unless_opened_on_purpose() -> None:
    options = parse_options([], {})
    assert options.metrics_address.startswith("127.0.0.1:")
    assert options.metrics_secure_address == ""
    secure = parse_options(["--metrics-secure-address", "0.0.0.0:8443"], {"CAPFLEET_METRICS_CERT_DIR": "/c"})
    assert (secure.metrics_secure_address, secure.metrics_cert_dir) == ("0.0.0.0:8443", "/c")


def test_the_operator_itself_never_imports_cryptography_for_its_certificate() -> None:
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from capfleet import securemetrics;"
            " securemetrics.tls_context(None, ['localhost']);"
            " print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == "[]"
