"""Get a catalog's text from a local path or a URL, with a disk cache for URLs.

A URL is fetched with httpx at most once per ``max_age_s``; the body is kept in
``cache_dir/<sha256 of the URL>.csv`` with its fetch time, ``ETag`` and ``Last-Modified`` in a
``.json`` beside it, and a stale copy is revalidated with a conditional GET (304 → reuse). When
the fetch fails and a cached copy exists, that copy is used (keep the last good data) and its
age says how old it is; with no copy the failure is raised.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from providers.errors import NotFoundError, TransientError

# A public catalog changes about daily; an hour between revalidations keeps us current without
# hammering the host.
CATALOG_MAX_AGE_S = 3600.0
# Catalog files are a few MB; a slow host must not hold the poller for long.
FETCH_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Fetched:
    """A catalog's text and where it came from (``location``, :func:`redacted`). ``fetched_at``: when the content was read from
    its origin (aware UTC; a file's modification time); ``stale_error``: why a cached copy was
    used instead of a fresh one (``None`` when fresh)."""

    text: str
    location: str
    fetched_at: datetime
    from_cache: bool
    stale_error: str | None = None

    def age_s(self, now: float | None = None) -> float:
        """Seconds since the content was read from its origin."""
        return max(0.0, (now or time.time()) - self.fetched_at.timestamp())


def is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def redacted(location: str) -> str:
    """``location`` as it may be shown or logged: a URL's user-info and query values masked
    (``https://***@host/vms.csv?token=***``), its fragment dropped; a path unchanged."""
    if not is_url(location):
        return location
    parts = urlsplit(location)
    netloc = parts.netloc.rpartition("@")
    query = "&".join(f"{p.partition('=')[0]}=***" if "=" in p else "***"
                     for p in parts.query.split("&") if p)
    return urlunsplit((parts.scheme, f"***@{netloc[2]}" if netloc[1] else netloc[2],
                       parts.path, query, ""))


class CatalogFetcher:
    """Reads catalog locations. One instance may be shared; not thread-safe (the poller calls
    it from one job at a time).

    Args:
        cache_dir: where URL bodies are cached (created on first use).
        max_age_s: a cached URL body younger than this is used without a request.
        client: an ``httpx.Client`` to use (tests pass one with a transport); default a new
            client with :data:`FETCH_TIMEOUT_S`.
    """

    def __init__(self, cache_dir: Path, max_age_s: float = CATALOG_MAX_AGE_S,
                 client: httpx.Client | None = None) -> None:
        self.cache_dir = cache_dir
        self.max_age_s = max_age_s
        self._client = client or httpx.Client(timeout=FETCH_TIMEOUT_S, follow_redirects=True)

    def close(self) -> None:
        self._client.close()

    def fetch(self, location: str) -> Fetched:
        """The text at ``location`` (a path, ``file://`` path, or ``http(s)://`` URL).

        Raises:
            NotFoundError: a local file does not exist, or the URL answered 404 with no cache.
            TransientError: the URL could not be fetched and nothing is cached.
        """
        if not is_url(location):
            path = Path(location.removeprefix("file://")).expanduser()
            try:
                text = path.read_text()
                mtime = path.stat().st_mtime
            except OSError as exc:
                raise NotFoundError(f"catalog {path}: {exc.strerror or exc}", provider="catalog") from None
            return Fetched(text, str(path), datetime.fromtimestamp(mtime, tz=UTC), False)
        return self._fetch_url(location)

    def _paths(self, url: str) -> tuple[Path, Path]:
        digest = hashlib.sha256(url.encode()).hexdigest()[:24]
        return self.cache_dir / f"{digest}.csv", self.cache_dir / f"{digest}.json"

    def _fetch_url(self, url: str) -> Fetched:
        # Only the request sees ``url``; texts and files get ``shown`` (it may carry a token).
        shown = redacted(url)
        body_path, meta_path = self._paths(url)
        meta = _read_json(meta_path)
        cached = body_path.is_file() and meta is not None
        if cached and time.time() - meta["checked_at"] < self.max_age_s:
            return Fetched(body_path.read_text(), shown, _at(meta["fetched_at"]), True)
        headers = {}
        if cached and meta.get("etag"):
            headers["If-None-Match"] = meta["etag"]
        if cached and meta.get("last_modified"):
            headers["If-Modified-Since"] = meta["last_modified"]
        try:
            response = self._client.get(url, headers=headers)
        except httpx.HTTPError as exc:
            why = f"{type(exc).__name__}: {str(exc).replace(url, shown)}"
            return self._stale_or_raise(shown, body_path, meta, why)
        if response.status_code == 304 and cached:
            meta["checked_at"] = time.time()
            _write_atomic(meta_path, json.dumps(meta).encode())
            return Fetched(body_path.read_text(), shown, _at(meta["fetched_at"]), True)
        if response.status_code != 200:
            if response.status_code == 404 and not cached:
                raise NotFoundError(f"catalog {shown}: HTTP 404", provider="catalog")
            return self._stale_or_raise(shown, body_path, meta, f"HTTP {response.status_code}")
        now = time.time()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(body_path, response.content)
        _write_atomic(meta_path, json.dumps({
            "url": shown, "fetched_at": now, "checked_at": now,
            "etag": response.headers.get("etag"),
            "last_modified": response.headers.get("last-modified")}).encode())
        return Fetched(response.text, shown, _at(now), False)

    def _stale_or_raise(self, shown: str, body_path: Path, meta: dict | None,
                        why: str) -> Fetched:
        if body_path.is_file() and meta is not None:
            return Fetched(body_path.read_text(), shown, _at(meta["fetched_at"]), True, why)
        # No chained HTTP error: its request holds the real URL.
        raise TransientError(f"catalog {shown}: {why}; no cached copy", provider="catalog") from None


def _at(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) and "fetched_at" in data else None
    except (OSError, ValueError):
        return None


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
