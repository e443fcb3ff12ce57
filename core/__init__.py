"""gpu-arbiter's vocabulary: the models, units and paths that adapters, policies and the service
share. It imports nothing from ``scheduler``, ``providers`` or ``policies``."""
