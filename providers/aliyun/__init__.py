"""Alibaba Cloud adapter (aliyun-python-sdk-ecs): GPU offers with pay-as-you-go and spot prices
converted to USD, DescribeSpotAdvice interruption risk, spot/pay-as-you-go lifecycle with client
tokens and ownership tags.

- :mod:`.client`: SDK calls only (credentials, endpoints, paging, tenacity retries, error codes).
- :mod:`.translate`: pure API dicts → offers, prices, instances.
- :mod:`.launch`: pure launch request → ``RunInstances`` parameters and user data.
- :mod:`.settings`: the config model.
- :mod:`.provider`: :class:`AliyunProvider` on :mod:`providers.regional`.
"""

from providers.aliyun.provider import AliyunProvider
from providers.aliyun.settings import AliyunLaunchSettings, AliyunSettings

__all__ = ["AliyunLaunchSettings", "AliyunProvider", "AliyunSettings"]
