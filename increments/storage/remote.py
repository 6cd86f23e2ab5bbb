"""A Location on an object store (S3, GCS, Azure) through obstore.

One obstore store per (scheme, bucket, options) and process, created at the bucket's root; a
location is that store plus a key prefix. Credentials come from the cloud's environment (obstore
reads AWS_*, GOOGLE_*, AZURE_* as each cloud's SDK does), overridden by storage_options.
Create-only writes are obstore's ``mode="create"`` (a conditional put: If-None-Match on S3).
Every obstore error is re-raised as StorageError (or FileNotFoundError / FileExistsError) with a
redacted message naming the object's URL.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
from typing import Any
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import from_url

from . import Location, ObjectInfo, StorageError, redact, redact_url, remember_secrets

#: storage_options keys that configure the HTTP client, not the store (delta-rs accepts both in one dict)
_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "pool_idle_timeout",
                "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate", "proxy_excludes", "user_agent",
                "http1_only", "http2_only", "http2_keep_alive_interval", "http2_keep_alive_timeout",
                "http2_keep_alive_while_idle", "default_content_type"}
#: keys only delta-rs understands (its locking and log options): not passed to obstore
_DELTA_ONLY = {"aws_s3_allow_unsafe_rename", "aws_s3_locking_provider", "delta_dynamo_table_name",
               "aws_s3_pool_idle_timeout_seconds", "aws_sts_pool_idle_timeout_seconds", "max_retries",
               "retry_timeout", "aws_s3_get_internal_retries", "conditional_put"}

_STORES: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def _split_options(options: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    config: dict[str, str] = {}
    client: dict[str, Any] = {}
    for k, v in options.items():
        key = str(k).lower()
        bare = key
        for pre in ("aws_", "google_", "azure_"):
            if bare.startswith(pre) and bare[len(pre):] in _CLIENT_KEYS:
                bare = bare[len(pre):]
        if bare in _CLIENT_KEYS:
            client[bare] = v if not isinstance(v, str) or bare not in ("allow_http", "allow_invalid_certificates") \
                else v.lower() in ("1", "true", "yes")
        elif key in _DELTA_ONLY:
            continue
        elif key == "aws_endpoint_url":
            config["aws_endpoint"] = str(v)
        else:
            config[key] = str(v)
    return config, client


def _store(scheme: str, bucket: str, options: dict[str, Any]):
    key = (scheme, bucket, tuple(sorted((str(k), str(v)) for k, v in options.items())))
    st = _STORES.get(key)
    if st is None:
        with _LOCK:
            st = _STORES.get(key)
            if st is None:
                config, client = _split_options(options)
                try:
                    st = from_url(f"{scheme}://{bucket}", config=config or None, client_options=client or None)
                except Exception as e:  # noqa: BLE001  (obstore raises its own config errors)
                    raise StorageError(f"cannot open the object store {scheme}://{bucket}: {redact(e)}. Check the "
                                       "storage_options and the cloud's environment variables.") from None
                _STORES[key] = st
    return st


def _first_line(e: BaseException) -> str:
    return redact(str(e).split("\n", 1)[0])[:500]


def no_such_bucket(text: str, bucket: str | None = None) -> str | None:
    """When an object store's error says the bucket does not exist (S3's NoSuchBucket, GCS's and
    Azure's equivalents): a message naming the bucket and what to create; else None."""
    if not re.search(r"NoSuchBucket|ContainerNotFound|The specified bucket does not exist|"
                     r"The specified container does not exist", text):
        return None
    m = re.search(r"<BucketName>([^<]+)</BucketName>", text)
    name = m.group(1) if m else bucket
    where = re.search(r"(https?://[^/\s]+)/", text)
    return (f"NoSuchBucket: the bucket {name!r} does not exist"
            + (f" on {redact(where.group(1))}" if where else "")
            + f". Create it first (e.g. `aws s3 mb s3://{name}`, with --endpoint-url for an S3-compatible store), "
              "or use a location in a bucket that exists")


class RemoteLocation(Location):
    is_local = False

    def __init__(self, scheme: str, bucket: str, prefix: str, options: dict[str, Any], store: Any):
        self.scheme, self.bucket, self.prefix, self.options, self._store = scheme, bucket, prefix, options, store
        self.url = redact_url(f"{scheme}://{bucket}/{prefix}".rstrip("/"))

    @classmethod
    def open(cls, url: str, scheme: str, options: dict[str, Any]) -> "RemoteLocation":
        remember_secrets(options)
        parts = urlsplit(url)
        if scheme == "az" and parts.scheme in ("abfs", "abfss") and "@" in parts.netloc:
            bucket = parts.netloc.split("@", 1)[0]          # abfss://container@account.dfs.core.windows.net/...
            account = parts.netloc.split("@", 1)[1].split(".", 1)[0]
            options = {"azure_storage_account_name": account, **options}
        else:
            bucket = parts.netloc
        if not bucket:
            raise StorageError(f"location {redact_url(url)!r} names no bucket or container")
        return cls(scheme, bucket, parts.path.strip("/"), options, _store(scheme, bucket, options))

    # -- naming ------------------------------------------------------------------------------------
    def _k(self, name: str) -> str:
        name = name.strip("/")
        return f"{self.prefix}/{name}" if self.prefix and name else (self.prefix or name)

    def _rel(self, key: str) -> str:
        return key[len(self.prefix) + 1:] if self.prefix else key

    def child(self, *parts: str) -> "RemoteLocation":
        extra = "/".join(p.strip("/") for part in parts for p in [str(part)] if p.strip("/"))
        return RemoteLocation(self.scheme, self.bucket, self._k(extra) if extra else self.prefix, self.options,
                              self._store)

    def _fail(self, what: str, name: str, e: BaseException) -> StorageError:
        missing = no_such_bucket(str(e), self.bucket)
        return StorageError(f"{what} {self.join(name)} failed: {missing or _first_line(e)}")

    # -- objects -----------------------------------------------------------------------------------
    def read_bytes(self, name: str) -> bytes:
        try:
            return bytes(obstore.get(self._store, self._k(name)).bytes())
        except FileNotFoundError as e:
            if no_such_bucket(str(e), self.bucket):      # not a missing object: the bucket is missing
                raise self._fail("reading", name, e) from None
            raise FileNotFoundError(f"{self.join(name)} does not exist") from None
        except Exception as e:  # noqa: BLE001
            raise self._fail("reading", name, e) from None

    def fetch_local(self, name: str, cache_dir: str) -> str:
        """A local copy of the object under `cache_dir`, streamed in chunks (a multi-GB object is
        never held in memory whole); the caller removes it."""
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix="fetch-", suffix="-" + os.path.basename(name))
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in obstore.get(self._store, self._k(name)).stream(min_chunk_size=8 << 20):
                    f.write(chunk)
        except FileNotFoundError:
            os.unlink(tmp)
            raise FileNotFoundError(f"{self.join(name)} does not exist") from None
        except Exception as e:  # noqa: BLE001
            os.unlink(tmp)
            raise self._fail("reading", name, e) from None
        return tmp

    def write_bytes(self, name: str, data: bytes, *, create_only: bool = False) -> None:
        try:
            obstore.put(self._store, self._k(name), data, mode="create" if create_only else "overwrite")
        except (AlreadyExistsError, PreconditionError):
            raise FileExistsError(f"{self.join(name)} already exists") from None
        except Exception as e:  # noqa: BLE001
            raise self._fail("writing", name, e) from None

    def head(self, name: str) -> ObjectInfo | None:
        try:
            m = obstore.head(self._store, self._k(name))
        except FileNotFoundError:
            return None
        except Exception as e:  # noqa: BLE001
            raise self._fail("looking up", name, e) from None
        return _info(name, m)

    def list(self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None) -> list[ObjectInfo]:
        pre = self._k(prefix.rstrip("/"))
        pre = pre + "/" if pre else None
        try:
            stream = obstore.list(self._store, pre, offset=self._k(start_after) if start_after else None,
                                  chunk_size=min(1000, limit) if limit else 1000)
            out = []
            for chunk in stream:           # with a limit: the pages up to it only (S3 sends 1000 keys a page)
                out += [_info(self._rel(m["path"]), m) for m in chunk]
                if limit and len(out) >= limit:
                    break
        except Exception as e:  # noqa: BLE001
            raise self._fail("listing", prefix, e) from None
        out.sort(key=lambda o: o.name)
        return out

    def list_dir(self, prefix: str = "") -> tuple[list[ObjectInfo], list[str]]:
        pre = self._k(prefix.rstrip("/"))
        try:
            res = obstore.list_with_delimiter(self._store, pre or None)
        except Exception as e:  # noqa: BLE001
            raise self._fail("listing", prefix, e) from None
        files = sorted((_info(self._rel(m["path"]), m) for m in res["objects"]), key=lambda o: o.name)
        return files, sorted(self._rel(p.rstrip("/")) for p in res["common_prefixes"])

    def delete(self, name: str) -> None:
        try:
            obstore.delete(self._store, self._k(name))
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001
            raise self._fail("deleting", name, e) from None

    def delete_prefix(self, prefix: str) -> None:
        keys = [self._k(o.name) for o in self.list(prefix)]
        for i in range(0, len(keys), 1000):
            try:
                obstore.delete(self._store, keys[i:i + 1000])
            except FileNotFoundError:
                pass
            except Exception as e:  # noqa: BLE001
                raise self._fail("deleting under", prefix, e) from None


def _info(name: str, m: dict) -> ObjectInfo:
    lm = m.get("last_modified")
    return ObjectInfo(name, int(m.get("size") or 0), int(lm.timestamp() * 1000) if lm is not None else 0,
                      m.get("e_tag"))
