"""One redaction helper for every message increments writes: errors, logs, progress, the CLI,
Dagster metadata and webhook failures.

Contract of ``redact(text)``: in every URL the text carries, whatever its scheme (``ftp://``,
``postgresql+psycopg://``, ``https://``, ``s3://``, ``redis://``, ...):
* the password of the user info is masked (``user:***@``); user info without a password is masked
  whole for web and object-store schemes (``https://TOKEN@host``: a token used as user name) and
  kept for the others (``postgresql://increments@db`` names a role, not a secret);
* a signed URL (a ``sig``, ``signature``, ``X-Amz-Signature``, ``X-Goog-Signature`` parameter:
  S3 presigned URLs, Azure SAS, GCS signed URLs) loses its whole query string (``?***``): its
  parameters together are the credential;
* otherwise the value of every secret-looking query parameter (token, password, secret, key,
  credential, ...) is masked (``?token=***&page=2``);
also ``password=...`` pairs of libpq-style connection strings, and every secret value that
``remember_secrets`` was told about or that sits in a cloud variable of the environment
(AWS_*, AZURE_*, GOOGLE_*, GCS_*, GCP_* with a secret-looking name).

``redacted_exception(e)`` is an exception (and its chain) with redacted messages, for what stores a
chain (a Dagster step failure). ``logger(name)`` is ``logging.getLogger(name)`` with a filter applying ``redact`` to each record's
message and arguments: every module of increments gets its logger from it.
"""
from __future__ import annotations

import logging
import os
import re
from typing import Any

#: option and parameter names whose values are secrets
SECRET_KEY = re.compile(r"secret|password|passwd|pwd|token|sas|signature|credential|private|account_key|access_key|"
                        r"session|client_id|bearer|sig|apikey|api_key|auth_key|key", re.I)
_NOT_SECRET_PARAM = re.compile(r"^(sslmode|keyspace|partition_key|sort_key|key_prefix)$", re.I)
_SIGNED = re.compile(r"^(sig|signature|x-amz-signature|x-goog-signature)$", re.I)
_MASK_USER = {"http", "https", "s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "ws", "wss"}
#: scheme://[userinfo@]rest, the rest up to whitespace, a quote or a closing bracket
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s'\"<>()\[\]{}]*)")
_DSN_PASSWORD = re.compile(r"\b(password|passwd|pwd)\s*=\s*('[^']*'|\"[^\"]*\"|[^\s&;,'\"]+)", re.I)
MASK = "***"
_known_secrets: set[str] = set()


def _redact_userinfo(scheme: str, rest: str) -> str:
    auth_end = len(rest)
    for ch in "/?#":
        i = rest.find(ch)
        if i != -1:
            auth_end = min(auth_end, i)
    at = rest.rfind("@", 0, auth_end)
    if at == -1:
        return rest
    info, host = rest[:at], rest[at + 1:]
    if ":" in info:
        user = info.split(":", 1)[0]
        return f"{user}:{MASK}@{host}" if user else f":{MASK}@{host}"
    return f"{MASK}@{host}" if scheme.lower() in _MASK_USER else rest


def _redact_query(rest: str) -> str:
    q = rest.find("?")
    if q == -1:
        return rest
    head, query = rest[:q], rest[q + 1:]
    frag = ""
    if "#" in query:
        query, frag = query.split("#", 1)
        frag = "#" + frag
    pairs = [p.split("=", 1) for p in query.split("&")]
    if any(_SIGNED.match(p[0]) for p in pairs):
        return f"{head}?{MASK}"
    out = []
    for p in pairs:
        if len(p) == 2 and SECRET_KEY.search(p[0]) and not _NOT_SECRET_PARAM.match(p[0]) and p[1]:
            out.append(f"{p[0]}={MASK}")
        else:
            out.append("=".join(p))
    return f"{head}?{'&'.join(out)}{frag}"


def redact_url(url: Any) -> str:
    """`url` (or any text holding URLs) with every URL's credentials masked (see the module doc)."""
    def one(m: re.Match) -> str:
        scheme, rest = m.group(1), m.group(2)
        return f"{scheme}://{_redact_query(_redact_userinfo(scheme, rest))}"
    return _URL.sub(one, str(url))


def remember_secrets(options: dict[str, Any] | None) -> None:
    """Record the secret-looking values of `options` so that redact() masks them anywhere."""
    for k, v in (options or {}).items():
        if isinstance(v, str) and len(v) >= 4 and SECRET_KEY.search(str(k)):
            _known_secrets.add(v)


_ENV_PREFIX = re.compile(r"^(AWS|AZURE|GOOGLE|GCS|GCP)_")
_env_cache: tuple[dict, list[str]] = ({}, [])


def _env_secrets() -> list[str]:
    """The secret-looking values of the cloud variables of the environment. Cached: the cache is
    reused while the environment equals the copy it was computed from (one dict comparison; a
    changed, added or removed variable recomputes it)."""
    global _env_cache
    env = getattr(os.environ, "_data", None)     # CPython's dict behind os.environ (bytes keys/values)
    if env is None:
        env = dict(os.environ)
    seen, secrets = _env_cache
    if env == seen:
        return secrets
    secrets = [v for k, v in os.environ.items()
               if len(v) >= 4 and _ENV_PREFIX.match(k) and SECRET_KEY.search(k)]
    _env_cache = (dict(env), secrets)
    return secrets


def redact(text: Any) -> str:
    """`text` with every URL's credentials, libpq password pairs and known secret values masked."""
    out = _DSN_PASSWORD.sub(lambda m: f"{m.group(1)}={MASK}", redact_url(str(text)))
    env = _env_secrets()
    if not _known_secrets and not env:
        return out
    for s in sorted(_known_secrets.union(env), key=len, reverse=True):
        out = out.replace(s, MASK)
    return out


def redact_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """`options` for display: secret-looking values masked, URLs in the others redacted."""
    return {k: (MASK if SECRET_KEY.search(str(k)) and not _NOT_SECRET_PARAM.match(str(k)) else
                redact(v) if isinstance(v, str) else v) for k, v in (options or {}).items()}


class _Redacted(Exception):
    """Base of the stand-ins redacted_exception makes (named as the exception they stand for)."""


def redacted_exception(e: BaseException, _depth: int = 0) -> BaseException:
    """`e` itself when neither its message nor those of its causes and contexts carry a secret;
    else a stand-in exception with the same class name and module, the redacted message, e's
    traceback and the redacted chain -- for what records an exception with its chain (Dagster's
    step failure keeps the cause's message and stack)."""
    cause = e.__cause__
    context = None if e.__suppress_context__ else e.__context__
    new_cause = redacted_exception(cause, _depth + 1) if cause is not None and _depth < 8 else None
    new_context = redacted_exception(context, _depth + 1) if context is not None and _depth < 8 else None
    try:
        msg = str(e)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails shows nothing
        msg = ""
    clean = redact(msg)
    if clean == msg and new_cause is cause and new_context is context:
        return e
    cls = type(type(e).__name__, (_Redacted,), {"__module__": type(e).__module__,
                                                 "__qualname__": type(e).__qualname__})
    out = cls(clean).with_traceback(e.__traceback__)
    out.__cause__, out.__context__ = new_cause, new_context
    out.__suppress_context__ = e.__suppress_context__
    return out


class RedactingFilter(logging.Filter):
    """Applies redact() to a record's message (its arguments merged in first) and traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report
            return True
        red = redact(msg)
        if red != msg or record.args:
            record.msg, record.args = red, None
        if record.exc_info and not record.exc_text:    # the traceback a handler prints (Formatter uses exc_text)
            record.exc_text = redact(_FORMATTER.formatException(record.exc_info))
        return True


_FORMATTER = logging.Formatter()


_FILTER = RedactingFilter()


def logger(name: str) -> logging.Logger:
    """logging.getLogger(name) with the redacting filter attached (once)."""
    log = logging.getLogger(name)
    if _FILTER not in log.filters:
        log.addFilter(_FILTER)
    return log


# the top-level `state` package logs through these names; it does not import increments at module
# level (increments imports it), so its loggers get the filter here, by name
for _name in ("increments.state", "increments.state.rocksdb"):
    logger(_name)
