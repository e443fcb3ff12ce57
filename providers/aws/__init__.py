"""AWS adapter (boto3): GPU offers with on-demand and spot prices, Spot Advisor interruption
risk, spot/on-demand lifecycle with client tokens and ownership tags.

- :mod:`.client`: boto3 calls only (pagination, adaptive retries, error-code mapping).
- :mod:`.translate`: pure API dicts → offers, prices, instances.
- :mod:`.launch`: pure launch request → ``run_instances`` arguments and user data.
- :mod:`.advisor`: the Spot Advisor file (a :class:`providers.cache.CachedFile`).
- :mod:`.provider`: :class:`AwsProvider` on :mod:`providers.regional`. :mod:`.settings`: its config.
"""

from providers.aws.provider import AwsProvider
from providers.aws.settings import AwsLaunchSettings, AwsSettings

__all__ = ["AwsLaunchSettings", "AwsProvider", "AwsSettings"]
