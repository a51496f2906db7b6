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
    assert errors.BackendUnavailable("NetBox answered 503").delay(retry) == delay
    translated = errors.to_kopf(errors.BackendUnavailable("NetBox answered 503"), retry=retry)
    assert isinstance(translated, kopf.TemporaryError)
    assert translated.delay is not None
    assert delay / 2 <= translated.delay <= delay


def test_retries_are_spread_between_half_the_delay_and_all_of_it() -> None:
    assert (errors.jittered(10.0, lambda: 0.0), errors.jittered(10.0, lambda: 1.0)) == (5.0, 10.0)
    retries = [errors.to_kopf(errors.BackendUnavailable("down"), retry=2) for _ in range(20)]
    drawn = {retry.delay for retry in retries if isinstance(retry, kopf.TemporaryError)}
    assert len(drawn) > 1, "failures that happened together do not retry together"


def test_rejected_credentials_retry_slowly() -> None:
    rejected = errors.BackendRejected("401", reason="AuthenticationFailed")
    assert rejected.delay(0) == 60.0
    translated = errors.to_kopf(rejected, retry=0)
    assert isinstance(translated, kopf.TemporaryError)
    assert str(translated).startswith("AuthenticationFailed:")
