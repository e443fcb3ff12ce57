"""Every malformed code bundle is a 422 naming ``bundle_b64``, and nothing is stored: bad
base64, not gzip, gzip cut short (``H4sIAAAAAAAA`` was a 500, an ``EOFError``), a corrupt
gzip, not a tar, a tar cut short (tarfile lists the members before the cut and used to accept
it: the agent then failed to unpack), over the unpacked size or member limits. Real app, real
Redis, real local object store."""

from __future__ import annotations

import base64
import gzip
import io
import tarfile

import pytest
from fastapi.testclient import TestClient

from scheduler.api.app import create_app
from scheduler.checkpoints.bundles import check_bundle
from scheduler.checkpoints.local import LocalObjectStore
from scheduler.checkpoints.objectstore import UnsafeBundle
from core.models.limits import BUNDLE_MAX_UNPACKED_BYTES
from scheduler.store import Store
from scheduler.store.agents import AgentTokens

TOKEN = "bundle-token"
SPEC = {"name": "train", "command": "python train.py"}


def tar_of(files: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def huge_member_header() -> bytes:
    """A tar whose one member says it holds more than the unpacked limit (no data follows):
    what a gzip bomb looks like to the check, without building one."""
    info = tarfile.TarInfo("zeros.bin")
    info.size = BUNDLE_MAX_UNPACKED_BYTES + 1
    return info.tobuf(tarfile.GNU_FORMAT)


TAR = tar_of([("train.py", b"print('hi')\n" * 400), ("data/x.bin", bytes(range(256)) * 40)])
GOOD = gzip.compress(TAR)
LAST = tarfile.open(fileobj=io.BytesIO(TAR)).getmembers()[-1]
BAD_BUNDLES = {
    "truncated gzip header (was a 500)": "H4sIAAAAAAAA",
    "not base64": "H4sI!!!!",
    "not gzip": base64.b64encode(b"just some text, not gzip").decode(),
    "gzip cut in the middle": base64.b64encode(GOOD[: len(GOOD) // 2]).decode(),
    "gzip without its trailer": base64.b64encode(GOOD[:-4]).decode(),
    "gzip with a wrong CRC": base64.b64encode(GOOD[:-8] + b"\0\0\0\0" + GOOD[-4:]).decode(),
    "gzip of nothing": base64.b64encode(gzip.compress(b"")).decode(),
    "gzip, not a tar": base64.b64encode(gzip.compress(b"hello " * 500)).decode(),
    "tar cut inside a member's data": base64.b64encode(gzip.compress(TAR[:3000])).decode(),
    # tarfile reads these two as a shorter archive: they were accepted (201)
    "tar cut inside a header": base64.b64encode(gzip.compress(TAR[:LAST.offset + 100])).decode(),
    "tar cut before its end block": base64.b64encode(
        gzip.compress(TAR[:LAST.offset_data + -(-LAST.size // 512) * 512])).decode(),
    "member over the unpacked limit": base64.b64encode(gzip.compress(huge_member_header())).decode(),
}


@pytest.fixture
def api(redis_client, tmp_path):
    app = create_app(Store.over(redis_client), LocalObjectStore(tmp_path / "objects"),
                     AgentTokens(b"secret"), TOKEN)
    return TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}), tmp_path / "objects"


def test_a_good_bundle_is_accepted(api):
    client, _ = api
    answer = client.post("/v1/jobs", json={"spec": SPEC, "bundle_b64": base64.b64encode(GOOD).decode()})
    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize("bundle", list(BAD_BUNDLES.values()), ids=list(BAD_BUNDLES))
def test_a_malformed_bundle_is_a_422_naming_bundle_b64_and_stores_nothing(api, redis_client,
                                                                          bundle):
    client, objects = api
    answer = client.post("/v1/jobs", json={"spec": SPEC, "bundle_b64": bundle})
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["problems"]
    assert problem["field"] == "bundle_b64" and problem["problem"]
    assert redis_client.keys("ga:job:*") == []
    assert not objects.exists() or not any(p.is_file() for p in objects.rglob("*"))


@pytest.mark.parametrize("data,message", [
    (gzip.compress(tar_of([("x" * 3000, b"")])), "unpacks to more than 2048 bytes"),
    (gzip.compress(tar_of([("a", b"\0" * 4000)])), "unpacks to more than 2048 bytes"),
    (gzip.compress(tar_of([("a", b"")]) + b"\0" * 4000), "unpacks to more than 2048 bytes"),
    (gzip.compress(tar_of([(f"f{i}", b"") for i in range(4)])), "more than 3 members"),
], ids=["long pax name", "large member", "zeros after the end", "members"])
def test_the_unpacked_limits_hold_before_anything_past_them_is_decompressed(data, message):
    """A long pax name, a large member, zeros after the end block, too many members."""
    with pytest.raises(UnsafeBundle, match=message):
        check_bundle(data, max_unpacked_bytes=2048, max_members=3)


def test_a_gzip_bomb_is_refused_and_the_same_bundle_within_the_limit_accepted():
    bomb = gzip.compress(tar_of([("a", b"\0" * (64 * 1024 * 1024))]))  # 64 MiB → 64 KiB
    with pytest.raises(UnsafeBundle):
        check_bundle(bomb, max_unpacked_bytes=1024 * 1024)
    check_bundle(bomb, max_unpacked_bytes=65 * 1024 * 1024)  # within the limit: accepted


@pytest.mark.parametrize("bundle", [None, ""], ids=["absent", "empty"])
def test_a_workdir_without_its_bundle_is_a_422_naming_bundle_b64(api, redis_client, bundle):
    """It was accepted and the job ran in an empty folder."""
    client, _ = api
    body = {"spec": {**SPEC, "workdir": "w"}} | ({} if bundle is None else {"bundle_b64": bundle})
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["problems"]
    assert problem["field"] == "bundle_b64" and "workdir 'w'" in problem["problem"]
    assert redis_client.keys("ga:job:*") == []
