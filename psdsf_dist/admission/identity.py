"""Tenants' identity: per-tenant tokens derived from the run's secret (pure).

A tenant's token is ``HMAC-SHA256(run secret, "tenant:" + name)`` in hex.  The operator, who
holds the run's secret, issues it (:func:`tenant_token`; ``Run.tenant_token``, ``psdsf-dist
run --tenant-tokens FILE``); the coordinator and the server actors, given the secret by the
run, check it (:func:`token_ok`) on every call a tenant makes in its own name.  Nothing is
stored per tenant, so a restarted actor checks tokens as before, and a token proves one name
only: knowing alice's token tells nothing about bob's (HMAC is a pseudo-random function of
the name under the secret).  Tokens are compared in constant time
(:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac

from psdsf_dist.errors import PsdsfError

TOKEN_ENV = "PSDSF_TENANT_TOKEN"
"""The environment variable :meth:`Tenant.connect` reads a token from when none is given."""


class TenantAuthError(PsdsfError, PermissionError):
    """A tenant-scoped call without the caller's valid token (one line)."""


def tenant_token(secret: str, user: str) -> str:
    """``user``'s token in the run of ``secret``."""
    return hmac.new(secret.encode(), b"tenant:" + user.encode(), hashlib.sha256).hexdigest()


def secret_ok(secret: str | None, given: str | None) -> bool:
    """Whether ``given`` is the run's ``secret`` (None: the run has none, anything goes),
    compared in constant time."""
    return secret is None or (
        given is not None and hmac.compare_digest(given.encode(), secret.encode()))


def token_ok(secret: str | None, user: str, token: str | None) -> bool:
    """Whether ``token`` proves ``user`` in the run of ``secret`` (no secret: nothing is
    checked, an open run)."""
    return secret is None or secret_ok(tenant_token(secret, user), token)
