"""A checkpoint store in an S3-compatible bucket (AWS S3, MinIO, Alibaba OSS, SeaweedFS).

Credentials come only from boto3's standard chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, instance roles); they never
appear in URLs, logs or error messages.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

import boto3
import boto3.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from s3transfer.manager import TransferManager

from scheduler.checkpoints.objectstore import (
    CheckpointStoreError,
    ObjectNotFound,
    check_key,
)

# Short connect timeout so an unreachable store fails fast and the caller's own retry loop
# (which keeps the job running) decides; reads may be slow for large blobs.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60
# botocore "standard" retry mode: exponential backoff with jitter on throttling, 5xx and
# connection errors, this many attempts in all (botocore's own default).
MAX_ATTEMPTS = 3
_DELETE_BATCH = 1000  # DeleteObjects accepts at most 1000 keys per call
_NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}


class S3ObjectStore:
    """An :class:`~scheduler.checkpoints.objectstore.ObjectStore` over ``s3://bucket/prefix``.

    - **bucket**: bucket name (3-63 characters); created on the first write if missing.
    - **prefix** (optional): key prefix inside the bucket, e.g. ``team-a/ckpt``; default ``''``.
    - **endpoint_url** (optional): ``http(s)://host:port`` of a non-AWS server; when set,
      path-style addressing is used (MinIO, SeaweedFS, most on-premise servers need it).
      Must not carry credentials.
    - **region_name** (optional): signing region; default from the boto3 chain, else
      ``us-east-1``.

    Writes are atomic (S3 PUT and multipart completion are). The boto3 client is thread-safe,
    so one store may be shared between threads.

    Raises ``ValueError`` for a malformed bucket or endpoint; every call raises
    :class:`CheckpointStoreError` when S3 refuses or cannot be reached, and
    :class:`ObjectNotFound` for a missing key on reads.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region_name: str | None = None,
    ) -> None:
        if not 3 <= len(bucket) <= 63:
            raise ValueError(f"S3 bucket name {bucket!r} must be 3-63 characters")
        if endpoint_url is not None:
            parts = urlsplit(endpoint_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("S3 endpoint_url must look like http(s)://host[:port]")
            if parts.username or parts.password:
                raise ValueError(
                    "S3 endpoint_url must not contain credentials; set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY (or a profile) instead"
                )
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        session = boto3.session.Session()
        region = region_name or session.region_name or "us-east-1"
        config = Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
            s3={"addressing_style": "path"} if endpoint_url else None,
        )
        self.region_name = region
        self._client = session.client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=config
        )
        self._bucket_ready = False
        self._bucket_lock = threading.Lock()
        self._transfers: TransferManager | None = None

    def __repr__(self) -> str:
        where = f", endpoint_url={self.endpoint_url!r}" if self.endpoint_url else ""
        return f"S3ObjectStore('s3://{self.bucket}/{self.prefix}'{where})"

    # -- helpers -----------------------------------------------------------------------------

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _error(self, action: str, key: str, exc: Exception) -> CheckpointStoreError:
        where = f"s3://{self.bucket}/{self.prefix}{key}"
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code", "?"))
            if code in _NOT_FOUND_CODES and action in ("get", "download"):
                return ObjectNotFound(key)
            detail = f"{code} {err.get('Message', '')}".rstrip()
            return CheckpointStoreError(f"S3 {action} {where} failed: {detail}")
        # BotoCoreError / S3 transfer errors carry no secrets (endpoint URL at most).
        return CheckpointStoreError(f"S3 {action} {where} failed: {exc}")

    def _ensure_bucket(self) -> None:
        if self._bucket_ready:
            return
        with self._bucket_lock:
            if self._bucket_ready:
                return
            try:
                self._client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in _NOT_FOUND_CODES:
                    raise self._error("head bucket", "", exc) from None
                self._create_bucket()
            except BotoCoreError as exc:
                raise self._error("head bucket", "", exc) from None
            self._bucket_ready = True

    def _create_bucket(self) -> None:
        kwargs: dict = {"Bucket": self.bucket}
        if self.region_name != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region_name}
        try:
            self._client.create_bucket(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise self._error("create bucket", "", exc) from None
        except BotoCoreError as exc:
            raise self._error("create bucket", "", exc) from None

    # -- ObjectStore ---------------------------------------------------------------------------

    def put_bytes(self, key: str, data: bytes) -> None:
        full = self._key(key)
        self._ensure_bucket()
        try:
            self._client.put_object(Bucket=self.bucket, Key=full, Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise self._error("put", key, exc) from None

    def _transfer_manager(self) -> TransferManager:
        # One manager for the store, so streams uploaded at once share its part concurrency
        # (boto3's default TransferConfig: what ``upload_file`` uses, 10 parts of 8 MiB).
        with self._bucket_lock:
            if self._transfers is None:
                self._transfers = TransferManager(self._client, TransferConfig())
            return self._transfers

    def put_stream(self, key: str, stream: BinaryIO) -> None:
        """Upload what ``stream.read(n)`` yields until it returns ``b''`` (multipart in 8 MiB
        parts, several at once, from 8 MiB on). Safe to call from several threads at once.

        An exception raised by ``stream.read`` fails the upload before it completes (a
        multipart upload is aborted): nothing becomes visible under ``key``, and that
        exception is raised as is. Raises :class:`CheckpointStoreError` when S3 fails.
        """
        full = self._key(key)
        self._ensure_bucket()
        try:
            self._transfer_manager().upload(stream, self.bucket, full).result()
        except (ClientError, BotoCoreError, boto3.exceptions.S3UploadFailedError) as exc:
            raise self._error("upload", key, exc) from None

    def get_bytes(self, key: str) -> bytes:
        full = self._key(key)
        try:
            return self._client.get_object(Bucket=self.bucket, Key=full)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise self._error("get", key, exc) from None

    def put_file(self, key: str, path: Path) -> None:
        full = self._key(key)
        self._ensure_bucket()
        try:
            self._client.upload_file(str(path), self.bucket, full)
        except (ClientError, BotoCoreError, boto3.exceptions.S3UploadFailedError) as exc:
            raise self._error("upload", key, exc) from None
        except OSError as exc:
            raise CheckpointStoreError(f"cannot read {path} for {key}: {exc}") from exc

    def get_file(self, key: str, dest_path: Path) -> None:
        full = self._key(key)
        dest_path = Path(dest_path)
        try:
            dest_path.parent.mkdir(parents=True, exist_ok=True)
            # s3transfer downloads to a temp name beside dest_path and renames it at the end.
            self._client.download_file(self.bucket, full, str(dest_path))
        except (ClientError, BotoCoreError, boto3.exceptions.Boto3Error) as exc:
            raise self._error("download", key, exc) from None
        except OSError as exc:
            raise CheckpointStoreError(f"cannot write {dest_path} for {key}: {exc}") from exc

    def exists(self, key: str) -> bool:
        full = self._key(key)
        try:
            self._client.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _NOT_FOUND_CODES:
                return False
            raise self._error("head", key, exc) from None
        except BotoCoreError as exc:
            raise self._error("head", key, exc) from None
        return True

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            for page in pages:
                keys.extend(obj["Key"][len(self.prefix):] for obj in page.get("Contents", []))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                return []
            raise self._error("list", prefix, exc) from None
        except BotoCoreError as exc:
            raise self._error("list", prefix, exc) from None
        return sorted(keys)

    def delete(self, keys: Iterable[str]) -> None:
        full_keys = [self._key(k) for k in keys]
        for start in range(0, len(full_keys), _DELETE_BATCH):
            batch = full_keys[start:start + _DELETE_BATCH]
            try:
                answer = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as exc:
                raise self._error("delete", batch[0][len(self.prefix):], exc) from None
            errors = [e for e in answer.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                first = errors[0]
                raise CheckpointStoreError(
                    f"S3 delete failed for {len(errors)} key(s), first "
                    f"s3://{self.bucket}/{first.get('Key')}: {first.get('Code')} "
                    f"{first.get('Message', '')}"
                )
