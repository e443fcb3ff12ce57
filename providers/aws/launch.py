"""Pure launch translation: a :class:`LaunchRequest` → ``run_instances`` arguments and the user
data that installs and starts the node agent (the script of :mod:`providers.bootstrap`). No I/O.

On EC2 the script reads the instance id from IMDSv2 (token ``PUT``, then
``meta-data/instance-id``) and gives the agent ``GA_METADATA_FLAVOR=aws`` and
``GA_METADATA_URL=http://169.254.169.254``. EC2 user data is also readable by principals
allowed ``ec2:DescribeInstanceAttribute``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core.models import Market, Offer
from providers import bootstrap
from providers.bootstrap import AGENT_BASE_DIR

TAG_KEY_MAX, TAG_VALUE_MAX = 128, 256
USER_DATA_MAX_BYTES = 16384  # EC2's limit on user data before base64
IMDS_URL = "http://169.254.169.254"
# systemd gives the agent this long to checkpoint after SIGTERM at shutdown: inside AWS's
# 2-minute notice, leaving time for the instance to stop.
AGENT_STOP_TIMEOUT_S = 110


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    """``{key: value}`` → EC2 ``[{"Key", "Value"}]``. Raises ``ValueError`` naming the tag when a
    key is empty, longer than 128 characters or starts with ``aws:``, or a value is longer than
    256 characters (EC2's rules)."""
    out = []
    for key, value in tags.items():
        if not key or len(key) > TAG_KEY_MAX or key.lower().startswith("aws:"):
            raise ValueError(f"tag key {key!r}: must be 1-{TAG_KEY_MAX} characters, not 'aws:…'")
        if len(value) > TAG_VALUE_MAX:
            raise ValueError(f"tag {key!r}: value longer than {TAG_VALUE_MAX} characters")
        out.append({"Key": key, "Value": value})
    return out


def run_instances_params(*, offer: Offer, client_token: str, tags: Mapping[str, str],
                         user_data: str, ami: str, subnet_id: str | None = None,
                         security_group_ids: Iterable[str] = (), key_name: str | None = None,
                         iam_instance_profile: str | None = None) -> dict[str, Any]:
    """The ``ec2.run_instances`` keyword arguments launching one instance for ``offer``.

    - ``ClientToken`` = ``client_token``: EC2 returns the first instance for a repeated token.
    - Spot: ``InstanceMarketOptions`` ``one-time`` with ``terminate`` on interruption (no max
      price: the cap is the on-demand price). On-demand: no market options.
    - ``tags`` (plus ``Name``) on the instance and its volumes; IMDSv2 required (the agent
      reads notices with a session token); an OS shutdown terminates the instance.
    - Placement: ``SubnetId`` when the zone has a configured subnet, else
      ``Placement.AvailabilityZone`` (default VPC).

    ``user_data`` is plain text (boto3 base64-encodes it). Raises ``ValueError`` when a tag is
    invalid or the user data exceeds 16 KiB.
    """
    size = len(user_data.encode())
    if size > USER_DATA_MAX_BYTES:
        raise ValueError(f"user data is {size} bytes; EC2 allows {USER_DATA_MAX_BYTES} "
                         "(is the job spec's env very large?)")
    tag_spec = tag_list({"Name": f"gpu-arbiter {client_token}"[:TAG_VALUE_MAX], **tags})
    params: dict[str, Any] = {
        "ImageId": ami, "InstanceType": offer.instance_type, "MinCount": 1, "MaxCount": 1,
        "ClientToken": client_token, "UserData": user_data,
        "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_spec},
                              {"ResourceType": "volume", "Tags": tag_spec}],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled",
                            "HttpPutResponseHopLimit": 2},
        "InstanceInitiatedShutdownBehavior": "terminate",
    }
    if subnet_id:
        params["SubnetId"] = subnet_id
    else:
        params["Placement"] = {"AvailabilityZone": offer.zone}
    if security_group_ids:
        params["SecurityGroupIds"] = list(security_group_ids)
    if key_name:
        params["KeyName"] = key_name
    if iam_instance_profile:
        key = "Arn" if iam_instance_profile.startswith("arn:") else "Name"
        params["IamInstanceProfile"] = {key: iam_instance_profile}
    if offer.market is Market.SPOT:
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time",
                            "InstanceInterruptionBehavior": "terminate"},
        }
    return params


def render_user_data(agent_env: Mapping[str, str], *, pip_spec: str, venv: str | None,
                     imds_url: str = IMDS_URL, base_dir: str = AGENT_BASE_DIR,
                     supervisor: str = "auto") -> str:
    """The EC2 user data script (see the module docstring) for one agent: arguments and
    errors as :func:`providers.bootstrap.render_user_data`; the defaults are what EC2 needs
    (tests run the script against a local IMDS in a temp dir). Never log the result: it
    carries ``agent_env``'s secrets."""
    return bootstrap.render_user_data(
        agent_env, cloud="EC2", flavor="aws", metadata_url=imds_url,
        instance_id_step=_INSTANCE_ID_STEP, pip_spec=pip_spec, venv=venv, base_dir=base_dir,
        supervisor=supervisor, stop_timeout_s=AGENT_STOP_TIMEOUT_S)


# Sets INSTANCE_ID from $METADATA (shell, inserted into providers/bootstrap.py's script).
_INSTANCE_ID_STEP = r"""
TOKEN=$(curl -sSf --retry 10 --retry-connrefused -X PUT "$METADATA/latest/api/token" \
  -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
INSTANCE_ID=$(curl -sSf --retry 10 --retry-connrefused -H "X-aws-ec2-metadata-token: $TOKEN" \
  "$METADATA/latest/meta-data/instance-id")
[[ "$INSTANCE_ID" =~ ^i-[0-9a-zA-Z]+$ ]] || { echo "bad instance id from IMDS"; exit 1; }
"""
