"""The ECS RPC request signature (signature method V2, HMAC-SHA1), written from Alibaba's
documentation, independently of the SDK, so the fake endpoint can check what the SDK sends.

The documented algorithm ("Request syntax and signature method V2 for RPC APIs", ECS API
reference "Request signatures"):

1. CanonicalizedQueryString: every request parameter except ``Signature`` (common and
   operation parameters, from the query string and, for a POST, the form body), sorted by
   name; each name and value percent-encoded in UTF-8 with RFC 3986 rules (``A-Z a-z 0-9 - _
   . ~`` kept, everything else ``%XY`` in upper-case hex, a space is ``%20``), joined as
   ``name=value`` with ``&``.
2. StringToSign = HTTPMethod + ``&`` + percentEncode(``/``) + ``&`` +
   percentEncode(CanonicalizedQueryString).
3. Signature = Base64(HMAC-SHA1(key = AccessKeySecret + ``&``, StringToSign)).

The documentation's worked example (DescribeRegions, AccessKeyId ``testid``, secret
``testsecret``, ``TimeStamp=2016-02-23T12:46:24Z``, nonce ``3ee8c1b8-…``) signs to
``CT9X0VtwR86fNWSnsc6v8YGOjuE=``; ``test_signature.py`` checks this module against it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")


def percent_encode(text: str) -> str:
    """RFC 3986 percent-encoding of ``text``'s UTF-8 bytes, as the signature rules say."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode("utf-8"))


def canonicalized_query(params: Mapping[str, str]) -> str:
    """Step 1: sorted, encoded ``name=value`` pairs joined with ``&`` (``Signature`` left out)."""
    items = sorted((k, v) for k, v in params.items() if k != "Signature")
    return "&".join(f"{percent_encode(k)}={percent_encode(v)}" for k, v in items)


def string_to_sign(method: str, params: Mapping[str, str]) -> str:
    """Step 2."""
    return f"{method.upper()}&{percent_encode('/')}&{percent_encode(canonicalized_query(params))}"


def signature(secret: str, method: str, params: Mapping[str, str]) -> str:
    """Step 3: the Base64 HMAC-SHA1 of the string to sign, keyed with ``secret + "&"``."""
    digest = hmac.new(f"{secret}&".encode(), string_to_sign(method, params).encode(),
                      hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def verify(secret: str, method: str, params: Mapping[str, str]) -> bool:
    """Whether ``params["Signature"]`` is the signature of the other parameters."""
    return hmac.compare_digest(params.get("Signature", ""), signature(secret, method, params))
