"""Domain errors map to kopf retries in one place, with growing, capped delays."""

import kopf
import pytest

from capfleet import errors


def test_invalid_spec_is_permanent() -> None:
    translated = errors.to_kopf(errors.InvalidSpec("bad CIDR 10.0.0.0/33"), retry=0)
    assert isinstance(translated, kopf.PermanentError)
    assert "InvalidSpec: bad CIDR 10.0.0.0/33" in str(translated)


@pytest.mark.parametrize(("retry", "delay"), [(0, 2.0), (1, 4.0), (3, 16.0), (20, 120.0)])
def test_backend_unavailable_backs_off_exponentially_up_to_a_cap(retry: int, delay: float) -> None:
    translated = errors.to_kopf(errors.BackendUnavailable("NetBox answered 503"), retry=retry)
    assert isinstance(translated, kopf.TemporaryError)
    assert translated.delay == delay


def test_rejected_credentials_retry_slowly() -> None:
    translated = errors.to_kopf(errors.BackendRejected("401", reason="AuthenticationFailed"), retry=0)
    assert isinstance(translated, kopf.TemporaryError)
    assert translated.delay == 60.0
    assert str(translated).startswith("AuthenticationFailed:")
