"""Pure pieces that the API clients and translations of region-based clouds share: request
counting, log redaction, error-code tables, batching, tolerant parsing, timestamps, the
hardware of a GPU instance type, the latest price per place, and prices in other currencies
than USD. No I/O."""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, TypeVar

from core.models import Market, Offer, OfferKey, PriceObservation
from providers.errors import ProviderError, TransientError

_log = logging.getLogger(__name__)
T = TypeVar("T")
V = TypeVar("V")


class RequestCounter:
    """HTTP requests sent (retries included) per operation name. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, operation: str) -> None:
        with self._lock:
            self._counts[operation] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


ErrorTable = tuple[tuple[type[ProviderError], frozenset[str], tuple[str, ...]], ...]


def error_class(table: ErrorTable, code: str, http_status: int = 0) -> type[ProviderError]:
    """The class of the first ``(class, codes, prefixes)`` row of ``table`` that names
    ``code`` or a prefix of it; else :class:`TransientError` for HTTP ≥ 500, else
    :class:`ProviderError`."""
    for cls, codes, prefixes in table:
        if code in codes or code.startswith(prefixes):
            return cls
    return TransientError if http_status >= 500 else ProviderError


class _Placed(Protocol):
    zone: str
    instance_type: str
    at: datetime


P = TypeVar("P", bound=_Placed)


def series(provider: str, region: str, zone: str, instance_type: str, market: Market) -> str:
    """The series key ``<provider>/<region>/<zone>/<type>/<market>``."""
    return OfferKey(provider=provider, region=region, zone=zone, instance_type=instance_type,
                    market=market).series()


def list_price_observations(provider: str, region: str, zones: Mapping[str, Iterable[str]],
                            usd: Mapping[str, float],
                            observed_at: datetime) -> list[PriceObservation]:
    """One on-demand observation per (zone, type) of ``zones`` (type → zones) with a list price
    in ``usd`` (type → USD/hour), stamped ``observed_at`` (when the list was fetched)."""
    return [PriceObservation(series=series(provider, region, zone, itype, Market.ON_DEMAND),
                             observed_at=observed_at, price_usd_per_hour=price)
            for itype, price in sorted(usd.items()) for zone in zones.get(itype, ())]


def latest_prices(prices: Iterable[P]) -> dict[tuple[str, str], P]:
    """(zone, instance type) → its most recent price record (the price in effect now)."""
    latest: dict[tuple[str, str], P] = {}
    for p in prices:
        key = (p.zone, p.instance_type)
        if key not in latest or p.at > latest[key].at:
            latest[key] = p
    return latest


def parse_each(items: Iterable[Any], parse: Callable[[Any], T | None]) -> tuple[list[T], int]:
    """``parse`` applied to every item (lazily consumed): (the results that are not None, the
    number of items skipped because ``parse`` raised ``ValueError``)."""
    out: list[T] = []
    skipped = 0
    for item in items:
        try:
            parsed = parse(item)
        except ValueError:
            skipped += 1
            continue
        if parsed is not None:
            out.append(parsed)
    return out, skipped


def logged_skips(parsed: tuple[T, int], what: str) -> T:
    """The result of a ``(result, skipped)`` parse; a warning says how many ``what`` (e.g.
    ``"aws spot prices in us-east-1: records"``) were skipped as malformed."""
    result, skipped = parsed
    if skipped:
        _log.warning("%s: skipped %d malformed", what, skipped)
    return result


def aware_utc(value: datetime | str) -> datetime:
    """A datetime, or an ISO-8601 text (``…Z``; ECS also writes minutes only, ``04:04Z``) →
    aware UTC; naive values are taken as UTC. Raises ``ValueError`` on unreadable text."""
    if not isinstance(value, datetime):
        value = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def known(table: Mapping[str, V], value: str, what: str) -> V:
    """``table[value]``; ``ValueError`` naming ``what`` and the known values when absent."""
    if value not in table:
        raise ValueError(f"{what} {value!r}; known: {', '.join(table)}")
    return table[value]


def chunks(values: Iterable[str], size: int) -> Iterator[list[str]]:
    """``values`` in lists of at most ``size`` (an API's limit on values per request)."""
    batch: list[str] = []
    for value in values:
        batch.append(value)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class RedactParameters(logging.Filter):
    """Drops an SDK's log records that mention any of ``words`` (request parameters such as
    user data, which carries the agent's secrets, or signatures)."""

    def __init__(self, words: tuple[str, ...]) -> None:
        super().__init__()
        self.words = words

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 (a record we cannot render is not worth the risk)
            return False
        return not any(word in text for word in self.words)


_REDACTION_LOCK = threading.Lock()


def install_log_redaction(logger_names: Iterable[str], words: tuple[str, ...]) -> None:
    """Attach one :class:`RedactParameters` for ``words`` to each named logger, once
    (idempotent; thread-safe)."""
    with _REDACTION_LOCK:
        for name in logger_names:
            logger = logging.getLogger(name)
            if not any(isinstance(f, RedactParameters) and f.words == words
                       for f in logger.filters):
                logger.addFilter(RedactParameters(words))


@dataclass(frozen=True)
class ListPrices(Generic[V]):
    """A region's list (on-demand) prices per instance type, as fetched at ``fetched_at``."""

    prices: dict[str, V]
    fetched_at: datetime


@dataclass(frozen=True)
class GpuType:
    """One GPU instance type's hardware: ``gpu_count`` GPUs of ``vram_gib`` each, ``vcpus``
    and ``memory_gib`` of host memory."""

    instance_type: str
    gpu_model: str
    gpu_count: int
    vcpus: int
    memory_gib: float
    vram_gib: float

    def offer(self, provider: str, region: str, zone: str, market: Market, price: float,
              on_demand: float | None, risk: float | None, observed_at: datetime) -> Offer:
        """The offer of this type in ``zone`` at ``price`` (USD/hour), ``on_demand`` the list
        price of the same type, ``risk`` None when unrated."""
        return Offer(provider=provider, region=region, zone=zone,
                     instance_type=self.instance_type, gpu_model=self.gpu_model,
                     gpu_count=self.gpu_count, vram_gib=self.vram_gib, vcpus=self.vcpus,
                     memory_gib=self.memory_gib, market=market, price_usd_per_hour=price,
                     on_demand_price_usd_per_hour=on_demand, interruption_risk=risk,
                     observed_at=observed_at)


def price_number(value: Any, field: str) -> float:
    """An API's price field (a number or its text) as a finite float ≥ 0; ``ValueError``
    naming ``field`` otherwise."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field} {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{field} {value!r} is not a price")
    return number


@dataclass(frozen=True)
class Currencies:
    """Converts prices to USD. ``default`` is the currency of answers that name none (an
    account's); ``usd_per_unit`` maps a currency code to USD per one unit (USD is always 1)."""

    default: str
    usd_per_unit: Mapping[str, float]

    def code(self, currency: str | None) -> str:
        return (currency or self.default).upper()

    def rate(self, currency: str | None) -> float:
        """USD per one unit of ``currency``. Raises ``ValueError`` when no rate is configured."""
        code = self.code(currency)
        if code == "USD":
            return 1.0
        rate = self.usd_per_unit.get(code)
        if rate is None:
            raise ValueError(f"no exchange rate for {code}: add exchange_rates_usd: "
                             f"{{{code}: <USD per 1 {code}>}}")
        return rate

    def to_usd(self, amount: float, currency: str | None) -> float:
        return amount * self.rate(currency)

    def usd_prices(self, listed: ListPrices[tuple[float, str]]) -> ListPrices[float]:
        """List prices ``type → (amount, currency)`` in USD; types without a rate are left
        out."""
        out = {}
        for key, (amount, currency) in listed.prices.items():
            try:
                out[key] = self.to_usd(amount, currency)
            except ValueError:
                continue
        return ListPrices(out, listed.fetched_at)


@dataclass(frozen=True)
class NativePrice:
    """A price as the cloud stated it: ``price`` (and ``on_demand_price``) per hour in
    ``currency``, converted at ``usd_per_unit``, observed at ``at`` (aware UTC)."""

    price: float
    currency: str
    usd_per_unit: float
    at: datetime
    on_demand_price: float | None = None


class NativePrices:
    """The prices behind a cloud's latest offers as the cloud stated them, by offer key (for
    clouds that answer in a currency other than USD). Thread-safe. Logs, once per currency at
    INFO and on later polls at DEBUG, which rate turned a region's prices into USD."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self._lock = threading.Lock()
        self._by_key: dict[OfferKey, NativePrice] = {}
        self._logged: set[str] = set()

    def get(self, key: OfferKey) -> NativePrice | None:
        """The price behind the last offer listed for ``key``, or None when none was."""
        with self._lock:
            return self._by_key.get(key)

    def record(self, region: str, pairs: Iterable[tuple[Offer, NativePrice]]) -> list[Offer]:
        """Remember each offer's native price; returns the offers."""
        pairs = list(pairs)
        with self._lock:
            self._by_key.update({offer.key: native for offer, native in pairs})
        natives = [native for _, native in pairs]
        for currency in sorted({n.currency for n in natives}):
            same = [n for n in natives if n.currency == currency]
            with self._lock:
                first = currency not in self._logged
                self._logged.add(currency)
            (_log.info if first and currency != "USD" else _log.debug)(
                "%s %s: %d offer prices in %s, converted to USD at %s USD/%s", self.provider,
                region, len(same), currency, same[0].usd_per_unit, currency)
        return [offer for offer, _ in pairs]
