"""``GET /v1/offers``: the latest offers, or with ``at`` the market as it was then (user token
required).

Without ``at``: rows of :func:`scheduler.services.offers.table` (latest offers, on-demand and
spot side by side, cheapest first). With ``at`` (an ISO time or a duration ago): rows of
:func:`scheduler.services.history.offers_at`, read from price history of ``source`` (see
:mod:`scheduler.api.history`). Filters: ``gpu`` (model, any case), ``provider``, ``market``
(``spot`` or ``on-demand``), ``min_vram_gib`` (finite, >= 0). A bad ``market``,
``min_vram_gib``, ``at`` or ``source`` answers 422 naming the field.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query

from core.models import Market
from scheduler.api.auth import require_user
from scheduler.services import history as history_service
from scheduler.services import offers as offer_service
from scheduler.store import Store


def router(store: Store) -> APIRouter:
    """The offers route over ``store``."""
    api = APIRouter(dependencies=[Depends(require_user)])

    @api.get("/v1/offers")
    def list_offers(gpu: str | None = None, provider: str | None = None,
                    market: Market | None = None,
                    min_vram_gib: float = Query(0, ge=0, allow_inf_nan=False),
                    at: str | None = None, source: str = "auto") -> list[dict[str, Any]]:
        market = market.value if market is not None else None
        if at:
            try:
                return history_service.offers_at(store, at, gpu=gpu, provider=provider,
                                                 market=market, min_vram_gib=min_vram_gib,
                                                 source=source)
            except history_service.QueryError as exc:
                raise HTTPException(422, str(exc)) from None
        return offer_service.table(store, gpu=gpu, provider=provider, market=market,
                                   min_vram_gib=min_vram_gib)

    return api
