"""Pure decision code: no I/O, no clocks, deterministic. The daemon and the simulator call the
same functions with plain data."""
