"""No credential a URL carries reaches a message, whatever the URL's scheme (issue 28.7): errors
raised by increments, the logs of its modules, progress, the CLI and Dagster metadata all go
through increments.redaction."""
from __future__ import annotations

import logging

import pytest

import increments as inc
from increments.redaction import logger, redact


def test_unknown_scheme_error_does_not_repeat_the_password(tmp_path):
    w = (inc.read_stream.memory("a INT").write_stream.format("parquet")
         .checkpoint_location(str(tmp_path / "chk")))
    with pytest.raises(inc.storage.UnknownSchemeError) as ei:
        w.start("ftp://user:PASS1234@host/x")
    msg = str(ei.value)
    assert "PASS1234" not in msg and "'ftp://user:***@host/x'" in msg and "unknown scheme 'ftp://'" in msg


def test_checkpoint_url_with_a_token_is_redacted_in_the_error(tmp_path):
    w = inc.read_stream.memory("a INT").write_stream.format("memory")
    with pytest.raises(inc.storage.UnknownSchemeError) as ei:
        w.checkpoint_location("webdav://h/chk?access_token=TOK123456").start()
    assert "TOK123456" not in str(ei.value) and "access_token=***" in str(ei.value)


@pytest.mark.parametrize("text,secret,shown", [
    ("ftp://user:PASS@host/x", "PASS", "ftp://user:***@host/x"),
    ("sftp://me:pw%40x@h:22/p", "pw%40x", "sftp://me:***@h:22/p"),
    ("postgresql+psycopg://role:hunter22@db:5432/x?sslmode=require", "hunter22",
     "postgresql+psycopg://role:***@db:5432/x?sslmode=require"),
    ("redis://:r3d1s@cache:6379/0", "r3d1s", "redis://:***@cache:6379/0"),
    ("amqp://guest:gpass@mq:5672/", "gpass", "amqp://guest:***@mq:5672/"),
    ("https://hooks.example.com/h?token=abc123&page=2", "abc123", "https://hooks.example.com/h?token=***&page=2"),
    ("http://x/cb?password=pw123", "pw123", "http://x/cb?password=***"),
    ("https://ghp_abcdef123@github.com/o/r.git", "ghp_abcdef123", "https://***@github.com/o/r.git"),
    ("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIAX&X-Amz-Signature=f00d",
     "f00d", "https://b.s3.amazonaws.com/k?***"),
    ("see 'https://acct.blob.core.windows.net/c/x?sv=1&se=2&sig=s1g'", "s1g",
     "see 'https://acct.blob.core.windows.net/c/x?***'"),
    ("custom+scheme://u:topsecret@h/x?api_key=K9", "topsecret", "custom+scheme://u:***@h/x?api_key=***"),
    ("host=db user=u password=libpqpw dbname=x", "libpqpw", "host=db user=u password=*** dbname=x"),
])
def test_every_scheme_is_redacted(text, secret, shown):
    out = redact(text)
    assert secret not in out and out == shown


def test_a_role_name_without_password_is_kept():
    assert redact("postgresql+psycopg://increments@db/streams") == "postgresql+psycopg://increments@db/streams"


def test_errors_and_logs_are_redacted(caplog):
    err = inc.AnalysisException("cannot reach ftp://u:PW999@h/x")
    assert "PW999" not in str(err) and "ftp://u:***@h/x" in str(err)
    with caplog.at_level(logging.WARNING, logger="increments.test_redaction"):
        logger("increments.test_redaction").warning("webhook %s failed", "https://h/x?token=LOGTOK1")
    assert "LOGTOK1" not in caplog.text and "https://h/x?token=***" in caplog.text


def test_a_logged_traceback_is_redacted(caplog):
    log = logger("increments.test_redaction")
    with caplog.at_level(logging.ERROR, logger="increments.test_redaction"):
        try:
            raise RuntimeError("GET https://h/x?password=TBPASS1 failed")
        except RuntimeError:
            log.exception("listener failed")
    assert "TBPASS1" not in caplog.text and "password=***" in caplog.text
