"""The one error tree every provider raises.

::

    ProviderError                 anything a provider could not do
    ├── CapacityError             no capacity for this offer now (spot reclaimed, no stock);
    │                             the controller marks the offer unavailable for a while
    ├── QuotaError                an account limit was hit
    ├── AuthError                 credentials missing, wrong or lacking a permission
    ├── NotFoundError             the instance or resource does not exist
    └── TransientError            throttling, timeouts, 5xx: retry later

Messages never contain credentials.
"""

from __future__ import annotations


class ProviderError(Exception):
    """Base of every provider failure. ``provider`` names the source, ``code`` the cloud's code."""

    def __init__(self, message: str, *, provider: str = "", code: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.code = code


class CapacityError(ProviderError):
    """No capacity for the requested offer right now."""


class QuotaError(ProviderError):
    """An account quota or limit prevents the request."""


class AuthError(ProviderError):
    """Credentials are missing or lack a permission."""


class NotFoundError(ProviderError):
    """The instance or resource does not exist."""


class TransientError(ProviderError):
    """A temporary failure (throttling, timeout, server error); the same call may succeed later."""
