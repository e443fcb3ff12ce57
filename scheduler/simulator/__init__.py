"""The simulator: replays a market (offers, price series, availability traces) through the same
``policies/`` functions the daemon calls, on a virtual clock, with no processes started."""
