"""The Vast.ai REST API through the ``vastai`` SDK (``vastai.VastAI``): SDK calls only, each
failure mapped onto :mod:`providers.errors`, requests counted.

The SDK sends ``Authorization: Bearer <key>`` to ``<server_url>/api/v0/…`` (``/api/v1/`` for
the paged instance list) and retries 429/502/503/504 and connection errors itself
(``retries`` attempts, honouring ``Retry-After`` up to 60 s). The key comes from
``VAST_API_KEY``, else the ``vastai`` CLI's key file (``~/.config/vastai/vast_api_key``,
legacy ``~/.vast_api_key``), resolved by the SDK; never from the config file. It never
appears in an error message or a log line: messages are built from the answer's status and
``error``/``msg`` fields with the key masked, and records of ``urllib3``/``requests``/
``vastai`` that mention it are dropped.

Error mapping (Vast answers ``{"success": false, "error": …, "msg": …}``, or
``{"detail": …}`` for 429; docs.vast.ai "create instance" and "prepay instance"):

=======================================  =========================================
401, 403                                 :class:`AuthError`
429, ≥ 500, connection errors, timeouts  :class:`TransientError`
404, 410 on create (ask gone or taken)   :class:`CapacityError`
``resources_unavailable``                :class:`CapacityError`
411, "insufficient credit"               :class:`QuotaError`
404 / "no such instance" elsewhere       :class:`NotFoundError`
anything else                            :class:`ProviderError` with Vast's ``error``
=======================================  =========================================
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import requests
from vastai import VastAI

from providers.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from providers.regional_api import RequestCounter, install_log_redaction

PROVIDER = "vastai"
T = TypeVar("T")
_LOGGERS = ("urllib3", "urllib3.connectionpool", "requests", "vastai")
_MASK = "***"


def _error_fields(response: requests.Response | None) -> tuple[int, str, str]:
    """(HTTP status, Vast's ``error`` code, its message) of a failed answer."""
    if response is None:
        return 0, "", ""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("msg") or body.get("detail") or body.get("message") or "")
    return response.status_code, str(body.get("error") or ""), message


def error_for(status: int, code: str, message: str, operation: str) -> ProviderError:
    """The :class:`ProviderError` of a failed ``operation`` (see the module's table)."""
    text = f"vastai {operation}: HTTP {status}" + (f" {code}" if code else "") + (
        f": {message}" if message else "")
    lowered = f"{code} {message}".lower()
    cls: type[ProviderError]
    if status in (401, 403):
        cls = AuthError
    elif status == 429 or status >= 500:
        cls = TransientError
    elif status == 411 or "credit" in lowered:
        cls = QuotaError
    elif code == "resources_unavailable" or (operation == "create" and status in (404, 410)):
        cls = CapacityError
    elif status == 404 or "no such instance" in lowered:
        cls = NotFoundError
    else:
        cls = ProviderError
    return cls(text, provider=PROVIDER, code=code or str(status))


class VastClient:
    """The SDK calls the adapter makes, on one ``VastAI`` object.

    - **server_url**: the API root (``https://console.vast.ai``, or a local fake).
    - **retries** / **timeout_s**: the SDK's attempts per request and seconds per request.
    - **api_key**: the key to use (tests); default the SDK's chain (see the module docstring).

    Thread-safe (the SDK opens a new HTTP session per request). ``requests`` counts the
    requests made per operation (retries not included: the SDK makes those).
    """

    def __init__(self, server_url: str, *, retries: int = 3, timeout_s: float = 30.0,
                 api_key: str | None = None) -> None:
        self.requests = RequestCounter()
        self._source: str | None = None
        self._key = ""
        key = api_key
        if key is not None:
            self._source = "the adapter's caller"
        elif os.environ.get("VAST_API_KEY"):
            self._source = "VAST_API_KEY"
        try:
            self._sdk: VastAI | None = VastAI(api_key=key, server_url=server_url,
                                              retry=retries, quiet=True)
        except RuntimeError:  # the SDK found no key anywhere
            self._sdk = None
            self._source = None
        else:
            self._sdk.client.timeout = timeout_s
            self._source = self._source or "the vastai CLI's key file"
            self._key = self._sdk.client.api_key or ""
            if self._key:
                install_log_redaction(_LOGGERS, (self._key,))

    def credentials_source(self) -> str | None:
        """Where the API key was found, or None when there is none."""
        return self._source

    def close(self) -> None:
        """Nothing to release: the SDK keeps no connection open between requests."""

    def _call(self, operation: str, call: Callable[[VastAI], T]) -> T:
        if self._sdk is None:
            raise AuthError("vastai: no API key: set VAST_API_KEY in the daemon's environment "
                            "or run `vastai set api-key`", provider=PROVIDER, code="NoApiKey")
        self.requests.add(operation)
        try:
            return call(self._sdk)
        except requests.HTTPError as exc:
            status, code, message = _error_fields(exc.response)
            raise self._masked(error_for(status, code, message, operation)) from None
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise self._masked(TransientError(f"vastai {operation}: {type(exc).__name__}",
                                              provider=PROVIDER, code="Network")) from None
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            raise self._masked(ProviderError(f"vastai {operation}: unexpected answer "
                                             f"({type(exc).__name__}: {exc})",
                                             provider=PROVIDER, code="BadAnswer")) from None

    def _masked(self, error: ProviderError) -> ProviderError:
        """``error`` with the API key masked out of its message (an echoed request)."""
        text = str(error)
        if self._key and self._key in text:
            error = type(error)(text.replace(self._key, _MASK), provider=error.provider,
                                code=error.code)
        return error

    def _checked(self, operation: str, answer: Any) -> Any:
        """An HTTP-200 answer that says ``success: false`` raised as its error."""
        if isinstance(answer, dict) and answer.get("success") is False:
            raise self._masked(error_for(200, str(answer.get("error") or ""),
                                         str(answer.get("msg") or ""), operation))
        return answer

    # ----- calls ------------------------------------------------------------------------------
    def search_offers(self, query: dict[str, Any], *, offer_type: str, limit: int,
                      storage_gib: float, verified_only: bool,
                      order: list[list[str]] | None = None) -> list[dict[str, Any]]:
        """``POST /bundles/``: rows of ``offer_type`` (``on-demand`` | ``bid``) matching
        ``query`` (Vast's ``{field: {op: value}}`` filters), at most ``limit``, in ``order``
        (``[[field, "asc"|"desc"]]``; default the SDK's, score descending), priced with
        ``storage_gib`` of disk. The SDK's default filters apply (rentable, not rented, not
        external), ``verified`` only when ``verified_only``."""
        from vastai.api import offers

        q = {"verified": {"eq": True}, "external": {"eq": False}, "rentable": {"eq": True},
             "rented": {"eq": False}} if verified_only else {
            "external": {"eq": False}, "rentable": {"eq": True}, "rented": {"eq": False}}
        q.update(query)
        answer = self._call("search_offers", lambda sdk: offers.search_offers(
            sdk.client, query=q, offer_type=offer_type, order=order, limit=limit,
            storage=storage_gib, no_default=True))
        return list(answer)

    def instances(self, select_filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """``GET /api/v1/instances/`` page after page (25 a page, the SDK's size)."""
        from vastai.api import instances

        return self._call("show_instances", lambda sdk: instances.show_instances(
            sdk.client, select_filters=select_filters))

    def create_instance(self, arguments: dict[str, Any]) -> int:
        """``PUT /asks/{id}/`` with ``arguments`` (``VastAI.create_instance``'s); the new
        instance id (``new_contract``)."""
        answer = self._checked("create", self._call(
            "create", lambda sdk: sdk.create_instance(**arguments)))
        try:
            return int(answer["new_contract"])
        except (KeyError, TypeError, ValueError):
            raise ProviderError("vastai create: the answer has no new_contract",
                                provider=PROVIDER, code="BadAnswer") from None

    def destroy_instance(self, instance_id: int) -> None:
        """``DELETE /instances/{id}/``. Raises :class:`NotFoundError` when it is gone."""
        self._checked("destroy", self._call(
            "destroy", lambda sdk: sdk.destroy_instance(id=instance_id)))

    def show_user(self) -> dict[str, Any]:
        """``GET /users/current`` (the SDK drops ``api_key`` from it): id, ``credit``…"""
        return self._call("show_user", lambda sdk: sdk.show_user())
