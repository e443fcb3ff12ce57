"""Public catalogs and price feeds: SkyPilot ``vms.csv`` catalogs as a display-only provider
(:mod:`providers.catalog.provider`) over one reader (:mod:`providers.catalog.reader`, also
used by replayed markets), and readers of recorded price dumps (:mod:`providers.catalog.dumps`)
for history imports."""

from providers.catalog.provider import CatalogConfig, CatalogProvider

__all__ = ["CatalogConfig", "CatalogProvider"]
