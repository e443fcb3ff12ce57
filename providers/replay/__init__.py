"""The replay provider: a spot market replayed from recorded prices and availability traces,
run as a local fake cloud whose instances are local processes.

- :func:`load_market` / :class:`ReplayMarket` (``market.py``): the market file and its offers.
- ``python -m providers.replay.cloud`` (``cloud.py``): the fake cloud process.
- :class:`ReplayProvider` (``provider.py``): a :class:`providers.base.Compute` over that process.
- :class:`ReplayCloud` (``instances.py``): the process's instances, apart from HTTP; each is
  warned of a reclaim as the cloud its offer imitates does it (``notice_metadata.py``, ``imds.py``).
- :func:`shutdown_cloud` (``client.py``): stop a cloud and its instances.
"""

from providers.replay.client import shutdown_cloud
from providers.replay.market import MarketError, ReplayMarket, load_market
from providers.replay.provider import ReplayProvider

__all__ = ["MarketError", "ReplayMarket", "ReplayProvider", "load_market", "shutdown_cloud"]
