"""Vast.ai: interruptible (bid) and on-demand GPU offers, prices and instances through the
``vastai`` SDK (see :mod:`providers.vastai.provider`)."""

from providers.vastai.provider import VastProvider
from providers.vastai.settings import BidPolicy, VastLaunchSettings, VastSettings

__all__ = ["BidPolicy", "VastLaunchSettings", "VastProvider", "VastSettings"]
