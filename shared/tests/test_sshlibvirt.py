"""Unit tests for the SSH side of capfleet.sshlibvirt: keys and known_hosts from text."""

from __future__ import annotations

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from capfleet.sshlibvirt import load_private_key, parse_known_hosts


def _ed25519() -> tuple[str, str]:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return private, public


def test_private_key_is_loaded_from_text() -> None:
    private, public = _ed25519()
    key = load_private_key(private)
    assert f"{key.get_name()} {key.get_base64()}" == public


def test_garbage_is_not_a_private_key() -> None:
    with pytest.raises(paramiko.SSHException):
        load_private_key("not a key")


def test_known_hosts_with_port_comments_and_blank_lines() -> None:
    _, public = _ed25519()
    keys = parse_known_hosts(f"# comment\n\n[127.0.0.1]:2222 {public}\nhv1,hv1.example {public}\n")
    assert keys.lookup("[127.0.0.1]:2222") is not None
    assert keys.lookup("hv1.example") is not None
    assert keys.lookup("127.0.0.1") is None
