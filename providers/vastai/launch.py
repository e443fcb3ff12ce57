"""Pure launch translation: a :class:`LaunchRequest` → the arguments of the SDK's
``create_instance`` (``PUT /api/v0/asks/{ask_id}/``), with the onstart script that installs
and starts the node agent (the script of :mod:`providers.bootstrap`). No I/O.

- ``label`` = ``gpu-arbiter:<client token>``: Vast has no client token, so launch looks the
  label up before creating (see :mod:`providers.vastai.provider` for the race this leaves).
- ``env``: ``GA_OFFER`` (the offer's series key) and ``GA_TAGS`` (the ownership tags as
  JSON), read back from the instance's ``extra_env`` by describe. No secret goes here: the
  env is listed by ``show instances``.
- ``onstart``: the bootstrap script with the agent's environment base64-encoded inside
  (readable by whoever holds the account's API key, like EC2 user data), metadata flavor
  ``none`` (Vast has no preemption notice to watch), supervised by ``nohup`` (an instance is
  a Docker container without systemd). The instance learns its id from ``CONTAINER_ID``,
  which Vast sets in every container (``VAST_CONTAINERLABEL`` = ``C.<id>`` as a fallback).
- ``price``: the bid for a spot offer (:mod:`providers.vastai.bidding`), None on-demand.
- ``cancel_unavail``: fail when the machine is taken instead of creating a stopped instance
  that bills storage; ``runtype`` ssh (the onstart script runs after Vast's ssh entrypoint).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from core.models import Market, Offer
from providers import bootstrap
from providers.vastai.settings import VastLaunchSettings
from providers.vastai.translate import ENV_OFFER, ENV_TAGS, LABEL_PREFIX

# Nothing sends an outbid instance a signal (it just stops); at a destroy the agent gets
# what Docker gives a stopping container. systemd (supervisor auto) waits this long.
AGENT_STOP_TIMEOUT_S = 10


def label_for(client_token: str) -> str:
    """The label carrying ``client_token``."""
    return f"{LABEL_PREFIX}{client_token}"


def instance_env(offer: Offer, tags: Mapping[str, str]) -> dict[str, str]:
    """The env naming the offer and the tags (see the module docstring)."""
    return {ENV_OFFER: offer.key.series(),
            ENV_TAGS: json.dumps(dict(tags), sort_keys=True, separators=(",", ":"))}


def render_onstart(agent_env: Mapping[str, str], cfg: VastLaunchSettings) -> str:
    """The onstart script for one agent. Never log it: it carries ``agent_env``'s secrets.
    Raises ``ValueError`` as :func:`providers.bootstrap.render_user_data`."""
    return bootstrap.render_user_data(
        agent_env, cloud="Vast.ai", flavor="none", metadata_url="",
        instance_id_step=_INSTANCE_ID_STEP, pip_spec=cfg.agent_pip_spec, venv=cfg.agent_venv,
        supervisor=cfg.supervisor, stop_timeout_s=AGENT_STOP_TIMEOUT_S)


def create_arguments(*, offer: Offer, ask_id: int, client_token: str, tags: Mapping[str, str],
                     agent_env: Mapping[str, str], cfg: VastLaunchSettings,
                     bid: float | None) -> dict[str, Any]:
    """Keyword arguments of ``VastAI.create_instance`` for ``offer`` on ask ``ask_id``.

    Raises ``ValueError`` when a spot offer has no ``bid`` (omitting it would rent
    on-demand) or an on-demand offer has one, or as :func:`render_onstart`.
    """
    if offer.market is Market.SPOT and bid is None:
        raise ValueError("an interruptible launch needs a bid: without one Vast rents the "
                         "machine on-demand at dph_total")
    if offer.market is Market.ON_DEMAND and bid is not None:
        raise ValueError("an on-demand launch takes no bid")
    return {"id": ask_id, "image": cfg.image, "disk": cfg.disk_gib,
            "env": instance_env(offer, tags), "price": bid, "label": label_for(client_token),
            "onstart_cmd": render_onstart(agent_env, cfg), "ssh": True,
            "cancel_unavail": True}


# Sets INSTANCE_ID (shell, inserted into providers/bootstrap.py's script).
_INSTANCE_ID_STEP = r"""
CONTAINER_LABEL="${VAST_CONTAINERLABEL:-}"
INSTANCE_ID="${CONTAINER_ID:-${CONTAINER_LABEL#C.}}"
[[ "$INSTANCE_ID" =~ ^[0-9]+$ ]] || { echo "no instance id in CONTAINER_ID"; exit 1; }
"""
