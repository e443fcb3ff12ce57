"""Open a checkpoint store from a URL (``GA_STORE_URL``).

Accepted forms:

- ``file:///abs/path`` or a plain path (``/abs/path``, ``rel/path``, ``~/ckpt``) → a
  :class:`~scheduler.checkpoints.local.LocalObjectStore`;
- ``s3://bucket[/prefix][?endpoint_url=http://127.0.0.1:8333][&region=us-east-1]`` → an
  :class:`~scheduler.checkpoints.s3.S3ObjectStore`. Credentials are never part of the URL: they
  come from the boto3 chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles, roles).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from scheduler.checkpoints.local import LocalObjectStore
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.checkpoints.s3 import S3ObjectStore

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
_S3_QUERY_KEYS = ("endpoint_url", "region")


def open_store(url: str) -> ObjectStore:
    """Build the store ``url`` names (no network call is made here).

    - **url**: ``file:///abs/path``, a plain local path, or
      ``s3://bucket/prefix?endpoint_url=...&region=...`` (query keys optional).

    Returns a :class:`LocalObjectStore` or an :class:`S3ObjectStore`.

    Raises ``ValueError`` naming the problem: empty URL, unsupported scheme, ``file://`` with a
    host or a relative path, an invalid bucket name, credentials inside the URL, or an unknown
    or repeated query key. The message never repeats credentials found in the URL.
    """
    url = (url or "").strip()
    if not url:
        raise ValueError("checkpoint store URL is empty; use file:///path or s3://bucket/prefix")
    scheme = urlsplit(url).scheme.lower()
    if scheme == "":
        return LocalObjectStore(Path(url).expanduser())
    if scheme == "file":
        return _open_file(url)
    if scheme == "s3":
        return _open_s3(url)
    raise ValueError(
        f"checkpoint store URL scheme {scheme!r} is not supported; use file:///path or "
        "s3://bucket/prefix?endpoint_url=..."
    )


def _open_file(url: str) -> LocalObjectStore:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(
            f"file URL host {parts.netloc!r} is not supported; write file:///absolute/path"
        )
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise ValueError("file URL needs an absolute path: file:///absolute/path")
    if parts.query:
        raise ValueError("file URL takes no query parameters")
    return LocalObjectStore(Path(path))


def _open_s3(url: str) -> S3ObjectStore:
    parts = urlsplit(url)
    if "@" in parts.netloc:
        # Never echo the netloc: it may hold an access key and secret.
        raise ValueError(
            "s3 URL must not contain credentials; set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) instead"
        )
    bucket = parts.netloc
    if not _BUCKET_RE.match(bucket):
        raise ValueError(
            f"s3 bucket name {bucket!r} is invalid: 3-63 lowercase letters, digits, '.' or '-', "
            "starting and ending with a letter or digit"
        )
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(_S3_QUERY_KEYS))
    if unknown:
        raise ValueError(
            f"s3 URL query key(s) {', '.join(unknown)} not supported; allowed: "
            f"{', '.join(_S3_QUERY_KEYS)}"
        )
    for key, values in query.items():
        if len(values) != 1 or not values[0]:
            raise ValueError(f"s3 URL query key {key!r} must be given exactly once, non-empty")
    prefix = unquote(parts.path).strip("/")
    if any(p in (".", "..") for p in prefix.split("/")) or "//" in prefix:
        raise ValueError(f"s3 prefix {prefix!r} may not contain '.', '..' or empty parts")
    return S3ObjectStore(
        bucket,
        prefix=prefix,
        endpoint_url=query.get("endpoint_url", [None])[0],
        region_name=query.get("region", [None])[0],
    )
