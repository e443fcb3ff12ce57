"""Pure launch translation: a :class:`LaunchRequest` → ``RunInstances`` parameters and the user
data that installs and starts the node agent (the script of :mod:`providers.bootstrap`). No I/O.

On ECS the script reads the instance id from the metadata service (``GET
http://100.100.100.200/latest/meta-data/instance-id``, InstanceMetadataItems.md) and gives the
agent ``GA_METADATA_FLAVOR=aliyun``, so that it watches ``instance/spot/termination-time``
(``AliyunNotices``). ECS user data is also readable by principals allowed
``ecs:DescribeUserData``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from functools import partial
from typing import Any

from core.models import Market, Offer
from providers import bootstrap

# Tag rules of ECS: keys 1-128 characters, values up to 128, neither starting with "aliyun" or
# "acs:", no "http://" or "https://"; at most 20 tags per instance.
TAG_KEY_MAX, TAG_VALUE_MAX, TAGS_MAX = 128, 128, 20
# RunInstances takes the user data Base64-encoded, at most 32 KB once encoded.
USER_DATA_MAX_BYTES = 32768
# ClientToken: at most 64 ASCII characters (RunInstances).
CLIENT_TOKEN_MAX = 64
# The tag that records the client token on the instance (DescribeInstances returns no token).
CLIENT_TOKEN_TAG = "gpu-arbiter:client-token"
METADATA_URL = "http://100.100.100.200"
# systemd gives the agent this long to checkpoint after SIGTERM at shutdown: inside the ~5 min
# between ECS's Recycling notice and the release.
AGENT_STOP_TIMEOUT_S = 240
_RESERVED_TAG_PREFIXES = ("aliyun", "acs:")


def tag_params(tags: Mapping[str, str]) -> dict[str, str]:
    """``{key: value}`` → ``Tag.N.Key``/``Tag.N.Value`` parameters. Raises ``ValueError``
    naming the tag when it breaks ECS's rules (see :data:`TAG_KEY_MAX` and the comment above)."""
    if len(tags) > TAGS_MAX:
        raise ValueError(f"{len(tags)} tags; ECS allows {TAGS_MAX}")
    params: dict[str, str] = {}
    for i, (key, value) in enumerate(tags.items(), start=1):
        lowered = key.lower()
        if (not key or len(key) > TAG_KEY_MAX or lowered.startswith(_RESERVED_TAG_PREFIXES)
                or "http://" in lowered or "https://" in lowered):
            raise ValueError(f"tag key {key!r}: 1-{TAG_KEY_MAX} characters, not 'aliyun…'/'acs:…'"
                             ", no URLs")
        if len(value) > TAG_VALUE_MAX or value.lower().startswith(_RESERVED_TAG_PREFIXES):
            raise ValueError(f"tag {key!r}: value longer than {TAG_VALUE_MAX} characters or "
                             "starting with 'aliyun'/'acs:'")
        params[f"Tag.{i}.Key"], params[f"Tag.{i}.Value"] = key, value
    return params


def run_instances_params(*, offer: Offer, client_token: str, tags: Mapping[str, str],
                         user_data: str, image_id: str, vswitch_id: str, security_group_id: str,
                         spot_strategy: str = "SpotAsPriceGo",
                         spot_price_limit: float | None = None, spot_duration_h: int = 1,
                         system_disk_category: str = "cloud_essd", system_disk_size_gib: int = 100,
                         internet_max_bandwidth_out_mbps: int = 0,
                         key_pair_name: str | None = None,
                         ram_role_name: str | None = None) -> dict[str, Any]:
    """The ``RunInstances`` parameters launching one pay-as-you-go instance for ``offer``.

    - ``ClientToken`` = ``client_token`` (ECS returns the first instance for a repeated token),
      also recorded in the :data:`CLIENT_TOKEN_TAG` tag with ``tags``.
    - Spot: ``SpotStrategy`` ``SpotAsPriceGo``, or ``SpotWithPriceLimit`` with
      ``SpotPriceLimit`` (per hour, in the account's currency), ``SpotDuration`` hours of
      protection, ``SpotInterruptionBehavior=Terminate``. On-demand: ``NoSpot``.
    - ``UserData``: ``user_data`` Base64-encoded; ``VSwitchId`` (fixes the zone) and ``ZoneId``.

    Raises ``ValueError`` for an invalid tag, a client token longer than 64 characters or not
    ASCII, user data over 32 KB encoded, or ``SpotWithPriceLimit`` without a positive limit.
    """
    if not client_token or len(client_token) > CLIENT_TOKEN_MAX or not client_token.isascii():
        raise ValueError(f"client token must be 1-{CLIENT_TOKEN_MAX} ASCII characters")
    encoded = base64.b64encode(user_data.encode()).decode()
    if len(encoded) > USER_DATA_MAX_BYTES:
        raise ValueError(f"user data is {len(encoded)} bytes Base64-encoded; ECS allows "
                         f"{USER_DATA_MAX_BYTES} (is the job spec's env very large?)")
    params: dict[str, Any] = {
        "InstanceType": offer.instance_type, "ZoneId": offer.zone, "ImageId": image_id,
        "VSwitchId": vswitch_id, "SecurityGroupId": security_group_id,
        "InstanceChargeType": "PostPaid", "Amount": 1, "MinAmount": 1,
        "ClientToken": client_token, "UserData": encoded,
        "InstanceName": f"gpu-arbiter-{client_token}"[:128],
        "SystemDisk.Category": system_disk_category, "SystemDisk.Size": system_disk_size_gib,
        "InternetMaxBandwidthOut": internet_max_bandwidth_out_mbps,
        "InternetChargeType": "PayByTraffic",
        **tag_params({**tags, CLIENT_TOKEN_TAG: client_token}),
    }
    if offer.market is Market.SPOT:
        params.update(SpotStrategy=spot_strategy, SpotDuration=spot_duration_h,
                      SpotInterruptionBehavior="Terminate")
        if spot_strategy == "SpotWithPriceLimit":
            if spot_price_limit is None or not spot_price_limit > 0:
                raise ValueError("SpotWithPriceLimit needs a positive SpotPriceLimit")
            params["SpotPriceLimit"] = round(spot_price_limit, 6)
    else:
        params["SpotStrategy"] = "NoSpot"
    if key_pair_name:
        params["KeyPairName"] = key_pair_name
    if ram_role_name:
        params["RamRoleName"] = ram_role_name
    return params


# Sets INSTANCE_ID from $METADATA (shell, inserted into providers/bootstrap.py's script).
_INSTANCE_ID_STEP = r"""
INSTANCE_ID=$(curl -sSf --retry 10 --retry-connrefused "$METADATA/latest/meta-data/instance-id")
[[ "$INSTANCE_ID" =~ ^[A-Za-z0-9-]+$ ]] || { echo "bad instance id from metadata"; exit 1; }
"""

# ECS's cloud-init script (module docstring) for one agent: providers.bootstrap's, with ECS's
# metadata address, instance-id step and stop timeout (arguments and errors there). The text
# carries agent_env's secrets: never log it.
render_user_data = partial(bootstrap.render_user_data, cloud="ECS", flavor="aliyun",
                           metadata_url=METADATA_URL, instance_id_step=_INSTANCE_ID_STEP,
                           stop_timeout_s=AGENT_STOP_TIMEOUT_S)
