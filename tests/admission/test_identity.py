"""Tenants' tokens: derived from the run's secret, one per name, checked in constant time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from psdsf_dist.admission.identity import secret_ok, tenant_token, token_ok


@given(secret=st.text(min_size=1), user=st.text(min_size=1), other=st.text(min_size=1))
def test_a_token_proves_its_name_only(secret: str, user: str, other: str) -> None:
    token = tenant_token(secret, user)
    assert token_ok(secret, user, token)
    assert token_ok(secret, other, token) == (other == user)
    assert not token_ok(secret + "x", user, token)
    assert not token_ok(secret, user, None)
    assert not token_ok(secret, user, token[:-1])


def test_an_open_run_checks_nothing() -> None:
    assert token_ok(None, "alice", None)
    assert token_ok(None, "alice", "anything")


def test_the_run_secret_is_checked_unless_there_is_none() -> None:
    assert secret_ok(None, None) and secret_ok(None, "anything")
    assert secret_ok("s3cret", "s3cret")
    assert not secret_ok("s3cret", None) and not secret_ok("s3cret", "s3cre")
