"""No credential reaches a log line: the redacting filter on real handlers, over messages,
arguments (as uvicorn's access log passes them) and tracebacks."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from service.runtime.redact import MASK, RedactingFilter, install, redact

TOKEN = "ghk_0123456789ab_Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXhxdXV4"
SECRET = TOKEN.split("_", 2)[2]


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger of its own writing through a filtered StringIO handler."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("tests.redact")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    install(logger)
    yield logger, out
    logger.removeHandler(handler)
    logger.propagate = True


def test_a_token_in_the_message_or_its_arguments_is_redacted(
        logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    logger.info("request with Authorization: Bearer %s from %s", TOKEN, "10.0.0.1")
    logger.info(f"bare token {TOKEN} in an f-string")
    logger.warning("%(n)d headers: %(h)s", {"n": 2, "h": {"authorization": f"Bearer {TOKEN}"}})
    logger.debug("token=%s", "abc123xyz")  # the secret's name in the template, its value not
    text = out.getvalue()
    assert SECRET not in text and "abc123xyz" not in text
    assert f"Authorization: {MASK} from 10.0.0.1" in text
    assert f"bare token ghk_0123456789ab_{MASK} in an f-string" in text  # the id stays
    assert f"2 headers: {{'authorization': '{MASK}'}}" in text
    assert f"DEBUG token={MASK}" in text


def test_uvicorn_access_log_arguments_keep_their_types(
        logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    logger.info('%s - "%s %s HTTP/%s" %d', "10.0.0.2:5123", "POST",
                "/write?db=telegraf&u=t&p=s3cretpass&precision=s", "1.1", 204)
    line = out.getvalue()
    assert "s3cretpass" not in line
    assert f'"POST /write?db=telegraf&u=t&p={MASK}&precision=s HTTP/1.1" 204' in line


def test_a_traceback_is_redacted(logged: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = logged
    try:
        raise ValueError(f"bad header Authorization: Token {SECRET}")
    except ValueError:
        logger.exception("request failed")
    text = out.getvalue()
    assert "ValueError: bad header Authorization: " in text and SECRET not in text


@pytest.mark.parametrize("raw,clean", [
    ("GET /v1/x?token=abc123&limit=5", f"GET /v1/x?token={MASK}&limit=5"),
    ("body: user=ops&password=hunter2", f"body: user=ops&password={MASK}"),
    ('{"api_token": "abc", "n": 1}', f'{{"api_token": "{MASK}", "n": 1}}'),
    ("access_token=xyz; path=/", f"access_token={MASK}; path=/"),
    ("authorization='Basic dXNlcjpwYXNz'", f"authorization='{MASK}'"),
    ("bearer abc.def-ghi", f"bearer {MASK}"),
    ("GET /v1/gpus?p=3", "GET /v1/gpus?p=3".replace("3", MASK)),
    ("nothing secret in this line, help=1", "nothing secret in this line, help=1"),
])
def test_what_is_redacted(raw: str, clean: str) -> None:
    assert redact(raw) == clean


def test_a_long_word_is_redacted_in_linear_time() -> None:
    word = "a" * 200_000
    assert redact(word) == word  # quadratic backtracking would take minutes here


def test_install_filters_every_root_handler_once_and_catches_child_loggers() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    child = logging.getLogger("tests.redact.child")
    old_level = child.level
    child.setLevel(logging.INFO)
    try:
        first = install()
        assert install() is first
        assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
        child.info("password=%s", "hunter2")
        assert out.getvalue() == f"password={MASK}\n"
    finally:
        root.removeHandler(handler)
        child.setLevel(old_level)
        for h in root.handlers:  # leave pytest's own handlers as they were
            for f in [f for f in h.filters if isinstance(f, RedactingFilter)]:
                h.removeFilter(f)
