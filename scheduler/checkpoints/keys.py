"""Every object key the checkpoint store writes, in one place.

::

    jobs/{job_id}/code.tar.gz                       the job's packed working directory
    jobs/{job_id}/blobs/{sha256}                    one file's bytes, content-addressed
    jobs/{job_id}/blobs/{sha256}.zst                the same, zstd-compressed (sha256 of the
                                                    ORIGINAL bytes)
    jobs/{job_id}/checkpoints/{checkpoint_id}.json  a CheckpointManifest, written last
    jobs/{job_id}/holds/{token}.json                a commit or restore in progress: what a
                                                    prune must not delete (see .holds)
    jobs/{job_id}/prunes/{token}.json               a prune in progress (see .holds)

``checkpoint_id`` is ``{created_ms:013d}-a{attempt}``, so plain string order is commit order.
"""

from __future__ import annotations

import re

_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
MANIFEST_SUFFIX = ".json"


def _job(job_id: str) -> str:
    if not _JOB_ID_RE.match(job_id):
        raise ValueError(
            f"job id {job_id!r} must be 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return f"jobs/{job_id}/"


def blobs_prefix(job_id: str) -> str:
    return _job(job_id) + "blobs/"


ZSTD_SUFFIX = ".zst"


def blob_key(job_id: str, sha256: str, encoding: str = "raw") -> str:
    """The blob of content ``sha256`` stored with ``encoding`` (``raw`` | ``zstd``): the two
    encodings live under different keys, so a manifest never names bytes it cannot decode."""
    if encoding == "zstd":
        return blobs_prefix(job_id) + sha256 + ZSTD_SUFFIX
    if encoding != "raw":
        raise ValueError(f"unknown blob encoding {encoding!r}")
    return blobs_prefix(job_id) + sha256


def holds_prefix(job_id: str) -> str:
    return _job(job_id) + "holds/"


def prunes_prefix(job_id: str) -> str:
    return _job(job_id) + "prunes/"


def manifests_prefix(job_id: str) -> str:
    return _job(job_id) + "checkpoints/"


def manifest_key(job_id: str, checkpoint_id: str) -> str:
    return manifests_prefix(job_id) + checkpoint_id + MANIFEST_SUFFIX


def checkpoint_id_of(key: str) -> str | None:
    """The checkpoint id in a manifest key, or ``None`` if ``key`` is not a manifest key."""
    name = key.rsplit("/", 1)[-1]
    if "/checkpoints/" not in key or not name.endswith(MANIFEST_SUFFIX):
        return None
    return name[: -len(MANIFEST_SUFFIX)]


def make_checkpoint_id(created_ms: int, attempt: int) -> str:
    """``{created_ms:013d}-a{attempt}``; ``created_ms`` is Unix time in milliseconds."""
    return f"{created_ms:013d}-a{attempt}"


def created_ms_of(checkpoint_id: str) -> int:
    """The millisecond timestamp at the front of a checkpoint id (``ValueError`` if malformed)."""
    return int(checkpoint_id.split("-", 1)[0])


def code_bundle_key(job_id: str) -> str:
    return _job(job_id) + "code.tar.gz"
