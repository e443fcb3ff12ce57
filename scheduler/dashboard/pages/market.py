"""The market pages: ``/ui/offers`` (the ``schedctl offers`` table) and ``/ui/prices`` (price
history charts).

- **Offers**: the rows of :func:`scheduler.services.offers.table`, the function behind
  ``GET /v1/offers`` and ``schedctl offers``, with the API's filters (``gpu``, ``provider``,
  ``market``, ``min_vram_gib``) passed through unchanged, plus two the page applies to those
  rows: ``region`` (case-insensitive) and ``max_usd_per_hour`` (the row's price in the chosen
  market, or its cheapest, at most this). Each price cell holds the API's value
  (``data-usd``, exact) and its text as the CLI prints it; each row shows its price's age
  (since the price started, as the CLI's) and its last poll's, exact ISO times in ``title``.
- **Prices**: step charts of price history from :func:`scheduler.services.history.points`
  (``GET /v1/history/points``), the series chosen by ``series`` (repeated) or by ``gpu`` /
  ``provider`` / ``region`` / ``market`` through :func:`scheduler.services.history.query`
  (``GET /v1/history``, whose statistics the page's table shows). One chart per instance
  type in a region: one line per zone and market, so spot and on-demand and the zones are
  side by side. ``period``: one of :data:`PERIODS`; ``source`` as the API's.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from core.models import OfferKey, utcnow
from scheduler.checkpoints.objectstore import ObjectStore
from scheduler.dashboard.pages.figures import (
    FormError,
    age_since,
    blank_none,
    optional_number,
    price_age,
    usd,
)
from scheduler.dashboard.render import page_user, render
from scheduler.services import history as history_service
from scheduler.services import offers as offer_service
from scheduler.store import Store
from scheduler.store.users import Principal

MARKETS = ("spot", "on-demand")
PERIODS = ("24h", "7d", "30d")
DEFAULT_PERIOD = "7d"
SOURCES = ("auto", "real", "replay", "all")
# Charts a page draws at most, and lines per chart: more is unreadable (and a page of
# every series of a year of real history would be megabytes).
MAX_CHARTS = 6
MAX_LINES = 12
MAX_SERIES_ASKED = MAX_CHARTS * MAX_LINES


def _choices(store: Store) -> dict[str, list[str]]:
    """Values the filter menus offer: those of the latest offers."""
    offers = store.offers.all_offers()
    return {"gpus": sorted({o.gpu_model for o in offers}),
            "providers": sorted({o.provider for o in offers}),
            "regions": sorted({o.region for o in offers})}


def _price_cell(row: dict[str, Any], market: str) -> dict[str, Any]:
    field = "spot_usd_per_hour" if market == "spot" else "on_demand_usd_per_hour"
    key = OfferKey(provider=row["provider"], region=row["region"], zone=row["zone"],
                   instance_type=row["instance_type"], market=market)
    value = row[field]
    return {"market": market, "usd": value, "text": usd(value, 3), "series": key.series()}


def _headline(row: dict[str, Any], market: str | None) -> str:
    """The row's series: the chosen market's, else spot's when listed (the price its age is
    of, as :func:`scheduler.services.offers.table` dates it), else on-demand's."""
    if market is None:
        market = "spot" if row["spot_usd_per_hour"] is not None else "on-demand"
    return _price_cell(row, market)["series"]


def _cheapest(row: dict[str, Any], market: str | None) -> float:
    fields = {"spot": ("spot_usd_per_hour",), "on-demand": ("on_demand_usd_per_hour",),
              None: ("spot_usd_per_hour", "on_demand_usd_per_hour")}[market]
    return min((row[f] for f in fields if row[f] is not None), default=float("inf"))


def offer_rows(rows: list[dict[str, Any]], market: str | None, now: datetime
               ) -> list[dict[str, Any]]:
    """API rows as the table shows them: the row itself (``api``), its ``series``, its price
    cells by market (those shown), and its ages."""
    shown = [m for m in MARKETS if market in (None, m)]
    out = []
    for r in rows:
        polled_text, polled_s = age_since(r["observed_at"], now)
        risk = r["interruption_risk"]
        out.append({
            "api": r, "series": _headline(r, market),
            "instance": "/".join((r["provider"], r["region"], r["zone"], r["instance_type"])),
            "prices": {m: _price_cell(r, m) for m in shown},
            "risk": "-" if risk is None else f"{100 * risk:.0f}%",
            "age": price_age(r["price_age_s"]), "polled": polled_text, "polled_s": polled_s,
        })
    return out


def _offer_filters(gpu: str | None, provider: str | None, region: str | None,
                   market: str | None, min_vram_gib: str | None,
                   max_usd_per_hour: str | None) -> dict[str, Any]:
    market = blank_none(market)
    if market is not None and market not in MARKETS:
        raise FormError("market", f"got {market[:40]!r}; allowed: spot, on-demand")
    return {"gpu": blank_none(gpu), "provider": blank_none(provider),
            "region": blank_none(region), "market": market,
            "min_vram_gib": optional_number(min_vram_gib, "min_vram_gib"),
            "max_usd_per_hour": optional_number(max_usd_per_hour, "max_usd_per_hour")}


def offers_view(store: Store, filters: dict[str, Any]) -> list[dict[str, Any]]:
    """The page's rows for ``filters`` (see the module docstring): the API's rows for its
    filters, then the page's own."""
    market = filters["market"]
    rows = offer_service.table(store, gpu=filters["gpu"], provider=filters["provider"],
                               market=market, min_vram_gib=filters["min_vram_gib"] or 0)
    if filters["region"]:
        rows = [r for r in rows if r["region"].lower() == filters["region"].lower()]
    if filters["max_usd_per_hour"] is not None:
        rows = [r for r in rows if _cheapest(r, market) <= filters["max_usd_per_hour"]]
    return offer_rows(rows, market, utcnow())


def _series_of(key: OfferKey, source: str) -> tuple[str, str, str, str]:
    return (source, key.provider, key.region, key.instance_type)


def step_chart(lines: list[tuple[str, list[list[Any]]]], empty: str) -> dict[str, Any]:
    """A chart of the charts.js contract from ``[(label, [[iso time, USD/h], ...])]`` step
    functions: one x axis (every point's time, unix seconds), each line's value held from
    its point to its next, ``null`` outside the line's span."""
    times = sorted({datetime.fromisoformat(t).timestamp() for _, pts in lines for t, _ in pts})
    series = []
    for label, pts in lines:
        at = [(datetime.fromisoformat(t).timestamp(), v) for t, v in pts]
        values, i, current = [], 0, None
        for x in times:
            while i < len(at) and at[i][0] <= x:
                current = at[i][1]
                i += 1
            inside = bool(at) and at[0][0] <= x <= at[-1][0]
            values.append(current if inside else None)
        series.append({"label": label, "values": values, "step": True})
    return {"x": times, "y_label": "USD/h", "series": series, "empty": empty}


def _chosen_series(store: Store, series: list[str], filters: dict[str, Any], period: str,
                   source: str) -> tuple[list[tuple[str, str]], list[dict[str, Any]], int]:
    """``([(series, source)], statistics rows, matched)`` for the page's choice."""
    if series:
        return [(s, source) for s in series[:MAX_SERIES_ASKED]], [], len(series)
    answer = history_service.query(store, since=period, by="series", source=source,
                                   **{k: v for k, v in filters.items() if v})
    rows = answer["rows"]
    return [(r["series_key"], r["source"]) for r in rows[:MAX_SERIES_ASKED]], rows, len(rows)


def price_charts(store: Store, chosen: list[tuple[str, str]], period: str
                 ) -> tuple[list[dict[str, Any]], list[str]]:
    """``(charts, problems)``: the step charts of ``chosen`` ``(series, source)`` over
    ``period``, one per source, provider, region and instance type (at most
    :data:`MAX_CHARTS`, :data:`MAX_LINES` lines each), ``{"id", "title", "data"}``; the first
    chart's id is ``chart-prices``. ``problems``: the series that could not be read, why."""
    groups: dict[tuple[str, str, str, str], list[tuple[str, list[list[Any]]]]] = defaultdict(list)
    problems = []
    for name, source in chosen:
        try:
            key = OfferKey.from_series(name)
            answer = history_service.points(store, name, since=period, source=source)
        except (ValueError, history_service.QueryError) as exc:
            problems.append(str(exc))
            continue
        group = groups[_series_of(key, answer["source"])]
        if len(group) < MAX_LINES:
            group.append((f"{key.zone} {key.market.value}", answer["points"]))
    charts = []
    for i, ((src, provider, region, itype), lines) in enumerate(sorted(groups.items())):
        if i >= MAX_CHARTS:
            break
        lines.sort(key=lambda line: line[0])
        charts.append({"id": "chart-prices" if i == 0 else f"chart-prices-{i + 1}",
                       "title": f"{provider} {region} {itype}", "source": src,
                       "data": step_chart(lines, f"no prices in the last {period}")})
    return charts, problems


def _default_gpu(store: Store, principal: Principal) -> str | None:
    """What the page opens on: the GPU of the newest placed active job the principal may
    see (the prices they pay), else of the cheapest offer listed now."""
    jobs = store.jobs.get_many(store.jobs.active_ids()).values()
    placed = [j for j in jobs if j.placement is not None and principal.may_see(j.spec.owner)]
    if placed:
        return max(placed, key=lambda j: (j.placement.decided_at, j.id)).placement.offer.gpu_model
    rows = offer_service.table(store)
    return rows[0]["gpu_model"] if rows else None


def router(store: Store, objects: ObjectStore) -> APIRouter:
    """The ``/ui/offers`` and ``/ui/prices`` pages over ``store``."""
    api = APIRouter()

    @api.get("/ui/offers", response_class=HTMLResponse)
    def offers_page(request: Request, principal: Principal = Depends(page_user),
                    gpu: str | None = None, provider: str | None = None,
                    region: str | None = None, market: str | None = None,
                    min_vram_gib: str | None = None,
                    max_usd_per_hour: str | None = None) -> HTMLResponse:
        raw = {"gpu": gpu, "provider": provider, "region": region, "market": market,
               "min_vram_gib": min_vram_gib, "max_usd_per_hour": max_usd_per_hour}
        try:
            filters = _offer_filters(**raw)
        except FormError as exc:
            return render(request, "offers.html", 422, title="Offers", error=str(exc),
                          rows=[], form=raw, markets=MARKETS, filtered=True,
                          **_choices(store))
        rows = offers_view(store, filters)
        return render(request, "offers.html", title="Offers", error=None, rows=rows,
                      form=raw, market=filters["market"], markets=MARKETS,
                      filtered=any(v for v in filters.values()), **_choices(store))

    @api.get("/ui/prices", response_class=HTMLResponse)
    def prices_page(request: Request, principal: Principal = Depends(page_user),
                    series: list[str] = Query(default=[]), gpu: str | None = None,
                    provider: str | None = None, region: str | None = None,
                    market: str | None = None, period: str = DEFAULT_PERIOD,
                    source: str = "auto") -> HTMLResponse:
        series = [s for s in (x.strip() for x in series) if s]
        filters = {"gpu": blank_none(gpu), "provider": blank_none(provider),
                   "region": blank_none(region), "market": blank_none(market)}
        context = {"title": "Prices", "periods": PERIODS, "sources": SOURCES,
                   "markets": MARKETS, "series": series, "period": period, "source": source,
                   **_choices(store)}
        if period not in PERIODS:
            return render(request, "prices.html", 422, error=f"period: got {period[:40]!r}; "
                          f"allowed: {', '.join(PERIODS)}", charts=[], stats=[], problems=[],
                          matched=0, form=filters, **context)
        if not series and not any(filters.values()):
            filters["gpu"] = _default_gpu(store, principal)
        try:
            chosen, stats, matched = _chosen_series(store, series, filters, period, source)
            charts, problems = price_charts(store, chosen, period)
        except history_service.QueryError as exc:
            return render(request, "prices.html", 422, error=str(exc), charts=[], stats=[],
                          problems=[], matched=0, form=filters, **context)
        return render(request, "prices.html", error=None, charts=charts, problems=problems,
                      stats=[{**r, "texts": {k: usd(r.get(k), 3) for k in
                                             ("min", "p50", "mean", "max", "last")}}
                             for r in stats[:MAX_SERIES_ASKED]],
                      matched=matched, form=filters, **context)

    return api
