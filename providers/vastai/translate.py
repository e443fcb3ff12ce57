"""Pure translation of Vast.ai API rows to offers, price observations and instances: no I/O,
no clock.

Search rows (``POST /api/v0/bundles/``, ``{"offers": [...]}``; the shape of
``shared/data/api_examples/vastai/search_offers_cli_raw_observed.json``), field by field:

- ``gpu_name`` ("RTX 4090", "H100 SXM") → :func:`gpu_model` (the project's names, as the
  public catalogs spell them: ``RTX4090``, ``H100``), named by its memory variant where Vast
  names both sizes alike (an ``A100`` row with 80 GiB is ``A100-80GB``, a 32 GiB ``V100``
  ``V100-32GB``: :func:`providers.catalog.gpus.memory_variant`); ``num_gpus`` → ``gpu_count``.
- ``gpu_ram``: memory PER GPU. The search help calls it GB and the docs "GPU memory in MB";
  the numbers are nvidia-smi's MiB (an RTX 4090 reports 24,564; 24 GiB is 24,576), so
  ``vram_gib = gpu_ram / 1024``. (``gpu_total_ram`` is the sum over the offer's GPUs.)
- ``cpu_cores_effective``: the vCPUs that come with the offer (the machine's cores times the
  offer's GPU share ``gpu_frac``) → ``vcpus`` (rounded down). ``cpu_ram``: MiB ("CPU RAM in
  MB") → ``memory_gib``.
- ``geolocation`` ("Guangxi, CN", or just "US") → region = the lower-case country code
  (``cn``), zone = region plus the place before the comma (``cn-guangxi``), else the region
  again; "unknown" when Vast names no place. A country is what a user can choose on Vast
  (its ``geolocation in [...]`` filter), the place what tells two hosts of one country apart.
- ``dph_total``: the on-demand price of the offer in USD/hour, storage of the searched
  ``allocated_storage`` included → the on-demand offer's price and every offer's
  ``on_demand_price_usd_per_hour``.
- ``min_bid``: "current minimum bid price in $/hr for interruptible" → the spot offer's price.
- ``reliability`` (else ``reliability2``): the host's reliability score in [0, 1] → the spot
  offer's ``interruption_risk = 1 − reliability`` (the share of the time Vast saw the host
  fail, read as the monthly chance that a host failure ends an instance). Being outbid is
  the other way an interruptible instance ends; Vast rates none, so this figure is a floor
  that the service's own observed preemptions add to. On-demand offers carry 0 (the model's
  convention), and ``interruption_notice_s = 0`` on spot: an outbid instance just stops.
- ``machine_id`` names the host: ``instance_type = m<machine_id>.<count>x<model>``, the same
  on every poll while the host lists that many GPUs (the ask ``id`` changes when the host
  re-lists; launch finds the current ask of the machine).

Instance rows (``GET /api/v1/instances/``, one page of ``{"instances": [...]}``; fields as in
``instance_row_abandoned_observed.json`` plus ``label`` and ``extra_env``, which the SDK turns
into a dict) → :class:`core.models.Instance`: see :func:`instance_state`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.models.instances import PREEMPTED
from core.models import (
    Instance,
    InstanceState,
    Market,
    Offer,
    OfferKey,
    PriceObservation,
)
from providers.catalog.gpus import memory_variant
from providers.regional_api import price_number

PROVIDER = "vastai"
MIB_PER_GIB = 1024.0
# An instance we launched carries LABEL_PREFIX + client token as its label (Vast has no
# client token); ENV_OFFER and ENV_TAGS in its env say which offer it was and its tags.
LABEL_PREFIX = "gpu-arbiter:"
ENV_OFFER, ENV_TAGS = "GA_OFFER", "GA_TAGS"
# Words of Vast's GPU names that are form factors, not models (SXM/PCIe boards of one chip
# share a name in the catalogs, as SkyPilot's Vast catalog spells them).
_FORM_FACTORS = {"SXM", "SXM2", "SXM4", "SXM5", "PCIE", "NVL"}
_VENDOR_WORDS = {"NVIDIA", "TESLA", "GEFORCE", "AMD"}
_ADA_RE = re.compile(r"(\d+)\s*ADA$", re.IGNORECASE)
_SLUG_RE = re.compile(r"[^a-z0-9]+")


def gpu_model(vast_name: str) -> str:
    """Vast's ``gpu_name`` → the project's GPU model name: vendor words and form factors
    dropped, the rest joined (``RTX 4090`` → ``RTX4090``, ``H100 SXM`` → ``H100``,
    ``Tesla V100`` → ``V100``, ``RTX A6000`` → ``RTXA6000``, ``RTX 6000Ada`` →
    ``RTX6000-Ada``, ``RTX PRO 6000 WS`` → ``RTXPRO6000WS``). Raises ``ValueError`` for an
    empty name."""
    words = [w for w in str(vast_name or "").replace("_", " ").split()
             if w.upper() not in _VENDOR_WORDS | _FORM_FACTORS]
    if not words:
        raise ValueError(f"gpu_name {vast_name!r} names no GPU model")
    joined = "".join(words)
    ada = _ADA_RE.search(joined)
    if ada:
        joined = joined[:ada.start()] + f"{ada.group(1)}-Ada"
    return joined.replace("/", "-")


def location(geolocation: str | None) -> tuple[str, str]:
    """``geolocation`` → (region, zone): ``"Guangxi, CN"`` → ``("cn", "cn-guangxi")``,
    ``"US"`` → ``("us", "us")``, nothing → ``("unknown", "unknown")``."""
    parts = [p.strip() for p in str(geolocation or "").split(",") if p.strip()]
    if not parts or not re.fullmatch(r"[A-Za-z]{2}", parts[-1]):
        return "unknown", "unknown"
    region = parts[-1].lower()
    place = _SLUG_RE.sub("-", parts[0].lower()).strip("-") if len(parts) > 1 else ""
    return region, f"{region}-{place}" if place else region


def instance_type(machine_id: int, count: int, model: str) -> str:
    """``m<machine_id>.<count>x<model>``, e.g. ``m22990.1xRTX4090``."""
    return f"m{machine_id}.{count}x{model}"


@dataclass(frozen=True)
class Ask:
    """One search row reduced to what launching needs: the ask ``ask_id`` to accept on
    ``machine_id`` with ``num_gpus``, its ``min_bid`` (USD/hour, None when not rentable
    interruptible) and ``dph_total`` (USD/hour on-demand)."""

    ask_id: int
    machine_id: int
    num_gpus: int
    min_bid: float | None
    dph_total: float


def _number(row: dict[str, Any], field: str) -> float:
    value = row.get(field)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"offer {row.get('id')}: {field} {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"offer {row.get('id')}: {field} {value!r} is out of range")
    return number


def ask_of(row: dict[str, Any]) -> Ask:
    """A search row → its :class:`Ask`. Raises ``ValueError`` naming the field."""
    min_bid = row.get("min_bid")
    return Ask(ask_id=int(_number(row, "id")), machine_id=int(_number(row, "machine_id")),
               num_gpus=int(_number(row, "num_gpus")),
               min_bid=None if min_bid is None else price_number(min_bid, "min_bid"),
               dph_total=price_number(row.get("dph_total"), "dph_total"))


def reliability_of(row: dict[str, Any]) -> float | None:
    """The host's reliability in [0, 1] (``reliability``, else ``reliability2``), or None."""
    for field in ("reliability", "reliability2"):
        value = row.get(field)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return min(1.0, max(0.0, float(value)))
    return None


def offer_from_row(row: dict[str, Any], market: Market, observed_at: datetime) -> Offer:
    """One search row → the offer of ``market`` (see the module docstring for each field).
    Raises ``ValueError`` naming the field when one is missing or bad, or when a spot offer's
    row has no ``min_bid``."""
    ask = ask_of(row)
    vram_gib = _number(row, "gpu_ram") / MIB_PER_GIB
    model = memory_variant(gpu_model(row.get("gpu_name") or ""), vram_gib)
    region, zone = location(row.get("geolocation"))
    if market is Market.SPOT:
        if ask.min_bid is None:
            raise ValueError(f"offer {ask.ask_id}: no min_bid for an interruptible offer")
        price, reliability = ask.min_bid, reliability_of(row)
        risk = None if reliability is None else 1.0 - reliability
        notice: float | None = 0.0
    else:
        price, risk, notice = ask.dph_total, 0.0, None
    return Offer(provider=PROVIDER, region=region, zone=zone,
                 instance_type=instance_type(ask.machine_id, ask.num_gpus, model),
                 market=market, gpu_model=model, gpu_count=ask.num_gpus,
                 vram_gib=vram_gib,
                 vcpus=int(_number(row, "cpu_cores_effective")),
                 memory_gib=_number(row, "cpu_ram") / MIB_PER_GIB,
                 price_usd_per_hour=price, on_demand_price_usd_per_hour=ask.dph_total,
                 interruption_risk=risk, interruption_notice_s=notice, observed_at=observed_at)


def offers_from_rows(rows: Iterable[dict[str, Any]], market: Market, observed_at: datetime,
                     into: dict[OfferKey, tuple[Offer, Ask]] | None = None
                     ) -> tuple[dict[OfferKey, tuple[Offer, Ask]], int]:
    """Offers of ``market`` by key, with the ask behind each (rows consumed lazily), added
    to ``into`` when given; when two rows give one key (a host listed twice) the cheaper
    stays. Returns (the offers, number of rows skipped as malformed)."""
    out: dict[OfferKey, tuple[Offer, Ask]] = {} if into is None else into
    skipped = 0
    for row in rows:
        try:
            offer = offer_from_row(row, market, observed_at)
            ask = ask_of(row)
        except (ValueError, TypeError):
            skipped += 1
            continue
        held = out.get(offer.key)
        if held is None or offer.price_usd_per_hour < held[0].price_usd_per_hour:
            out[offer.key] = (offer, ask)
    return out, skipped


def observations(offers: Iterable[Offer]) -> Iterator[PriceObservation]:
    """One observation per offer: its series, when it was observed, its price."""
    for offer in offers:
        yield PriceObservation(series=offer.key.series(), observed_at=offer.observed_at,
                               price_usd_per_hour=offer.price_usd_per_hour)


# ----- instances -------------------------------------------------------------------------------
# actual_status values that never reach running (vast-cli SKILL.md: "If actual_status becomes
# exited, unknown, or offline it will never reach running").
_DEAD = {"exited", "unknown", "offline"}
_STARTING = {None, "", "created", "loading", "rebooting", "frozen"}


def instance_state(row: dict[str, Any], market: Market) -> tuple[InstanceState, str | None]:
    """(state, terminated_reason) of an instance row.

    - Asked to stop (``intended_status`` or ``next_state`` ``stopped``; we never stop an
      instance, we destroy it): an interruptible instance was outbid → ``preempted`` with no
      notice (``shutting-down`` while the host still reports it running, else
      ``terminated``); unless the host says why in ``status_msg`` (an ``Error …`` from
      Docker: the host gave up, as in ``instance_row_abandoned_observed.json``), or the
      instance is on-demand: ``terminated`` with that reason.
    - ``actual_status`` ``exited``/``unknown``/``offline``: ``terminated`` (never runs).
    - ``running`` → ``running``; null/``created``/``loading``/``rebooting``/``frozen`` and
      values Vast may add → ``pending``.
    """
    actual = row.get("actual_status")
    stopping = "stopped" in (row.get("intended_status"), row.get("next_state"))
    message = str(row.get("status_msg") or "").strip()
    if stopping:
        if "error" in message.lower():
            return InstanceState.TERMINATED, f"host failed: {message[:200]}"
        if market is Market.SPOT:
            state = InstanceState.SHUTTING_DOWN if actual == "running" else InstanceState.TERMINATED
            return state, f"{PREEMPTED}: outbid"
        return InstanceState.TERMINATED, "stopped"
    if actual in _DEAD:
        return InstanceState.TERMINATED, f"host reports {actual}" + (f": {message[:200]}"
                                                                     if message else "")
    if actual == "running":
        return InstanceState.RUNNING, None
    return InstanceState.PENDING, None


def client_token_of(row: dict[str, Any]) -> str | None:
    """The client token in an instance's label, or None when we did not launch it."""
    label = row.get("label")
    if isinstance(label, str) and label.startswith(LABEL_PREFIX) and len(label) > len(LABEL_PREFIX):
        return label[len(LABEL_PREFIX):]
    return None


def instance_from_row(row: dict[str, Any]) -> Instance | None:
    """An instance row → :class:`Instance`, or None when the row is not one we launched
    (no label of ours). Raises ``ValueError`` naming the field when ours is malformed
    (``extra_env`` without a readable ``GA_OFFER``/``GA_TAGS``, no ``start_date``)."""
    token = client_token_of(row)
    if token is None:
        return None
    try:
        env = dict(row.get("extra_env") or {})
        key = OfferKey.from_series(str(env.get(ENV_OFFER) or ""))
        tags = dict(json.loads(env.get(ENV_TAGS) or "{}"))
        launched_at = datetime.fromtimestamp(float(row["start_date"]), UTC)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"instance {row.get('id')}: extra_env {ENV_OFFER}/{ENV_TAGS} or "
                         f"start_date unreadable ({exc})") from None
    state, reason = instance_state(row, key.market)
    return Instance(id=str(row.get("id")), provider=PROVIDER, offer=key, client_token=token,
                    state=state, launched_at=launched_at,
                    tags={str(k): str(v) for k, v in tags.items()}, terminated_reason=reason)
