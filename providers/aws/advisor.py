"""The AWS Spot Instance Advisor data: fetched with httpx, cached on disk, read as risks.

Source: the public JSON behind https://aws.amazon.com/ec2/spot/instance-advisor/
(default URL ``https://spot-bid-advisor.s3.amazonaws.com/spot-advisor-data.json``, ~1.5 MB),
``spot_advisor[region][os][instance_type] = {"s": savings %, "r": bucket 0..4}``. Buckets map
to interruption risk through :data:`providers.aws.translate.RISK_BY_BUCKET`.

The file is cached at ``cache_path`` and refetched when older than ``max_age_s``
(:data:`providers.aws.cache.SPOT_ADVISOR_TTL_S`). A failed fetch keeps the stale copy (or, with
none, no risks at all: spot offers are then unrated) and is retried
after :data:`providers.aws.cache.SPOT_ADVISOR_RETRY_S`. ``file://`` URLs are read directly
(offline installs, tests).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from providers.aws.cache import SPOT_ADVISOR_RETRY_S, SPOT_ADVISOR_TTL_S
from providers.aws.translate import advisor_risks

log = logging.getLogger(__name__)
FETCH_TIMEOUT_S = 20.0


class SpotAdvisor:
    """Interruption risk per (region, instance type) from the Spot Advisor file.

    - **url**: ``https://…`` or ``file://…`` of the advisor JSON.
    - **cache_path**: where the downloaded file is kept (parent created on demand).
    - **max_age_s**: refetch when the cached copy is older (seconds, by file mtime).
    - **clock**: wall-clock seconds (injectable for tests).

    Thread-safe. Every method may block on one HTTP download (``FETCH_TIMEOUT_S``) and never
    raises for network or format problems (they are logged).
    """

    def __init__(self, url: str, cache_path: Path, *, max_age_s: float = SPOT_ADVISOR_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self.cache_path = Path(cache_path)
        self.max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._risks: dict[str, dict[str, float]] | None = None
        self._loaded_mtime: float | None = None
        self._last_failure_at: float | None = None

    def cache_age_s(self) -> float | None:
        """Seconds since the cached file was written, or None when there is none."""
        try:
            return max(0.0, self._clock() - self.cache_path.stat().st_mtime)
        except OSError:
            return None

    def risks(self, region: str) -> dict[str, float]:
        """instance type → interruption risk (0–1) in ``region`` (Linux); empty when unknown."""
        with self._lock:
            self._ensure_loaded()
            return dict((self._risks or {}).get(region, {}))

    def refresh(self) -> bool:
        """Fetch now, whatever the cache age. Returns whether a fresh copy was stored."""
        with self._lock:
            ok = self._fetch()
            if ok:
                self._read_cache()
            return ok

    # ----- internals (hold self._lock) -------------------------------------------------------
    def _ensure_loaded(self) -> None:
        age = self.cache_age_s()
        stale = age is None or age >= self.max_age_s
        may_retry = (self._last_failure_at is None
                     or self._clock() - self._last_failure_at >= SPOT_ADVISOR_RETRY_S)
        if stale and may_retry:
            self._fetch()
        try:
            mtime = self.cache_path.stat().st_mtime
        except OSError:
            return
        if self._risks is None or mtime != self._loaded_mtime:
            self._read_cache()

    def _read_cache(self) -> None:
        try:
            mtime = self.cache_path.stat().st_mtime
            data = json.loads(self.cache_path.read_bytes())
            self._risks = advisor_risks(data)
            self._loaded_mtime = mtime
        except (OSError, ValueError) as exc:
            log.warning("spot advisor cache %s unreadable (%s); no advisor risks",
                        self.cache_path, exc)

    def _download(self) -> bytes:
        parts = urlsplit(self.url)
        if parts.scheme == "file":
            return Path(unquote(parts.path)).read_bytes()
        answer = httpx.get(self.url, timeout=FETCH_TIMEOUT_S, follow_redirects=True)
        answer.raise_for_status()
        return answer.content

    def _fetch(self) -> bool:
        try:
            body = self._download()
            advisor_risks(json.loads(body))  # refuse to cache something that is not the file
        except (OSError, httpx.HTTPError, ValueError) as exc:
            self._last_failure_at = self._clock()
            kept = "keeping the cached copy" if self.cache_path.exists() else "no risks known"
            log.warning("spot advisor fetch from %s failed (%s: %s); %s", self.url,
                        type(exc).__name__, str(exc)[:200], kept)
            return False
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.cache_path.with_name(self.cache_path.name + ".tmp")
        tmp.write_bytes(body)
        os.replace(tmp, self.cache_path)
        self._last_failure_at = None
        return True
