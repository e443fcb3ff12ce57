"""Size limits on what a user submits: every free-text field of a job spec, the spec as a
whole, and the code bundle. Listed in the README's "Job spec" section; a submission over one
is refused with a 422 naming the field (nothing is stored).

Why bounded: a job record is read and rewritten on every controller pass and its spec is
handed to the agent in its environment (a single variable may hold 128 KiB on Linux; EC2's
user data holds 16 KiB in all), so an unbounded field costs every pass memory and time. The
limits are far above what a real spec needs; the whole spec is capped at
:data:`SPEC_MAX_BYTES`, so the fields cannot all be at their maximum at once.

Lengths are in characters (Python ``len``), sizes in bytes.
"""

from __future__ import annotations

# Job spec fields.
NAME_MAX_CHARS = 63
"""``name`` and ``owner`` (also checked by their pattern)."""
COMMAND_MAX_CHARS = 16_384
"""``command``: a shell command line; ship longer scripts in the workdir."""
WORKDIR_MAX_CHARS = 4_096
"""``workdir``: a path on the submitting machine (Linux's PATH_MAX)."""
ENV_MAX_VARS = 128
"""``env``: number of variables."""
ENV_NAME_MAX_CHARS = 128
"""``env``: each variable's name."""
ENV_VALUE_MAX_CHARS = 16_384
"""``env``: each variable's value."""
LIST_MAX_ITEMS = 256
"""Name lists: ``providers``/``regions``/``zones`` ``allow`` and ``deny``, and
``resources.gpu_models``."""
LIST_ITEM_MAX_CHARS = 128
"""Each name in those lists."""
CHECKPOINT_DIR_MAX_CHARS = 1_024
"""``checkpoint.dir``: a path relative to the working directory."""
SPEC_MAX_BYTES = 65_536
"""The whole spec, as compact UTF-8 JSON of the validated fields."""

# The code bundle (``bundle_b64``: a gzip tar of the workdir).
BUNDLE_MAX_BYTES = 64 * 1024 * 1024
"""Compressed size, after base64 decoding."""
BUNDLE_MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
"""Uncompressed size (the tar stream: headers, file data, padding)."""
BUNDLE_MAX_MEMBERS = 100_000
"""Files, folders and links in the archive."""
