"""Provider adapters: one package per source. They translate a cloud's API to and from
``core.models``; no policy, no Redis. See :mod:`providers.base` for the protocol."""
