"""Read recorded AWS spot price dumps into price observations (pure: text in, models out).

Two public shapes (shared data ``price_history/``):

- ``aws ec2 describe-spot-price-history`` JSON (``{"SpotPriceHistory": [{"AvailabilityZone",
  "InstanceType", "ProductDescription", "SpotPrice", "Timestamp"}], "NextToken"}``): zones are
  zone names (``us-east-1b``), region = the zone less its letter.
- The monthly TSV of the public "AWS spot price history" archive: ``zone id, instance type,
  product description, price, timestamp`` with no header; zone ids (``euw3-az2``), region
  derived from the id's prefix (``euw3`` → ``eu-west-3``).

Only ``Linux/UNIX`` prices are kept (the series key has no OS; the scheduler launches Linux),
as the AWS adapter does. Series: ``aws/<region>/<zone>/<type>/spot``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from core.models import Market, OfferKey, PriceObservation

PROVIDER = "aws"
PRODUCT = "Linux/UNIX"

_AREAS = {"us": "us", "eu": "eu", "ap": "ap", "sa": "sa", "ca": "ca", "me": "me", "af": "af",
          "il": "il", "mx": "mx", "cn": "cn", "usg": "us-gov"}
_DIRECTIONS = {"e": "east", "w": "west", "n": "north", "s": "south", "c": "central",
               "ne": "northeast", "nw": "northwest", "se": "southeast", "sw": "southwest"}
_ZONE_ID_RE = re.compile(r"^(us|eu|ap|sa|ca|me|af|il|mx|cn|usg)(ne|nw|se|sw|e|w|n|s|c)(\d+)-az\d+\Z")


def region_of_zone_id(zone_id: str) -> str:
    """``use1-az1`` → ``us-east-1``, ``apne2-az3`` → ``ap-northeast-2``, ``usgw1-az1`` →
    ``us-gov-west-1``. Raises ``ValueError`` for an id of another shape."""
    m = _ZONE_ID_RE.match(zone_id)
    if not m:
        raise ValueError(f"not an AWS zone id: {zone_id!r}")
    area, direction, number = m.groups()
    return f"{_AREAS[area]}-{_DIRECTIONS[direction]}-{number}"


def parse_time(text: str) -> datetime:
    """ISO-8601 (``Z`` or offset; naive taken as UTC) → aware UTC datetime."""
    at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


@dataclass
class DumpRead:
    """Observations of one dump, the region each series belongs to, and skipped records."""

    observations: list[PriceObservation] = field(default_factory=list)
    records: int = 0
    skipped: Counter = field(default_factory=Counter)


def _series(region: str, zone: str, itype: str) -> str:
    return OfferKey(provider=PROVIDER, region=region, zone=zone, instance_type=itype,
                    market=Market.SPOT).series()


def parse_spot_history_json(text: str, source: str = "dump") -> DumpRead:
    """Observations of a ``describe-spot-price-history`` JSON output.

    Raises ``ValueError`` naming ``source`` when the text is not that shape. Records that are
    not Linux/UNIX or lack a field are counted in ``skipped``.
    """
    try:
        data = json.loads(text)
        records = data["SpotPriceHistory"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{source}: not a describe-spot-price-history JSON output "
                         "(no SpotPriceHistory list)") from None
    out = DumpRead()
    for rec in records:
        out.records += 1
        try:
            if rec.get("ProductDescription", PRODUCT) != PRODUCT:
                out.skipped["not Linux/UNIX"] += 1
                continue
            zone = rec["AvailabilityZone"]
            region = zone[:-1] if zone[-1].isalpha() else zone
            out.observations.append(PriceObservation(
                series=_series(region, zone, rec["InstanceType"]),
                observed_at=parse_time(rec["Timestamp"]),
                price_usd_per_hour=float(rec["SpotPrice"])))
        except (KeyError, TypeError, ValueError, IndexError):
            out.skipped["malformed"] += 1
    return out


def parse_spot_tsv(text: str, source: str = "tsv") -> DumpRead:
    """Observations of the archive TSV (zone id, type, product, price, timestamp; no header).

    Raises ``ValueError`` naming ``source`` and the line when a line has not 5 fields.
    """
    out = DumpRead()
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 5:
            raise ValueError(f"{source}:{line_no}: expected 5 tab-separated fields (zone id, "
                             f"instance type, product, price, timestamp), got {len(parts)}")
        out.records += 1
        zone_id, itype, product, price, stamp = (p.strip() for p in parts)
        if product != PRODUCT:
            out.skipped["not Linux/UNIX"] += 1
            continue
        try:
            out.observations.append(PriceObservation(
                series=_series(region_of_zone_id(zone_id), zone_id, itype),
                observed_at=parse_time(stamp), price_usd_per_hour=float(price)))
        except ValueError:
            out.skipped["malformed"] += 1
    return out
