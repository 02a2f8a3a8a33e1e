"""One root for every error the service answers over HTTP, and its one body: a problem detail
(RFC 9457, `application/problem+json`).

A domain error says what went wrong and which HTTP status that is; the API's one exception
handler (service.api.problems) writes the body. So a store or the remediation controller raises
`ActionConflict` and never builds a response, and every route answers errors in one shape:

    {"type": "/problems/conflict", "title": "Conflict", "status": 409,
     "detail": "a1b2 is succeeded; nothing to abort", "instance": "/v1/actions/a1b2/abort"}

Extension members (`retry_after`, `rejections`, ...) go beside those five; headers that the
status needs (`WWW-Authenticate` on 401, `Retry-After` on 429) travel with the error.

`field_errors` words a pydantic validation error for settings, plugin configs and scenarios
alike, without the input; it lives with the plugin registry (collectors.plugins), which the
collectors use too, and is re-exported here.

A leaf: it imports nothing from the service, so every layer may raise these.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, ClassVar

from collectors.plugins import field_errors as field_errors  # re-exported

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "/problems/"  # a relative URI reference, as RFC 9457 §3.1.1 allows


class GpuhealthError(Exception):
    """The root. A subclass fixes `status`, `slug` (the problem type's last segment) and
    `title` (the same for every occurrence of the type); an instance says `detail` (this
    occurrence), `headers` and any extension members."""

    status: ClassVar[int] = 500
    slug: ClassVar[str] = "internal-error"
    title: ClassVar[str] = "Internal server error"

    def __init__(self, detail: str, *, headers: Mapping[str, str] | None = None,
                 **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers: dict[str, str] = dict(headers or {})
        self.extensions: dict[str, Any] = extensions

    @property
    def type_uri(self) -> str:
        return TYPE_PREFIX + self.slug

    def problem(self, instance: str) -> dict[str, Any]:
        """The problem detail object (the members RFC 9457 defines, then the extensions)."""
        return {**self.extensions, "type": self.type_uri, "title": self.title,
                "status": self.status, "detail": self.detail, "instance": instance}


def generic_problem(status: int, detail: Any, instance: str) -> dict[str, Any]:
    """The body for a status with no domain error behind it (an unknown route, a method not
    allowed): `about:blank`, titled with the status phrase, as RFC 9457 §4.2.1 says."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    return {"type": "about:blank", "title": title, "status": status,
            "detail": detail if isinstance(detail, str) else title, "instance": instance}


class BadRequest(GpuhealthError):
    status, slug, title = 400, "bad-request", "Bad request"


class Unauthorized(GpuhealthError):
    """No valid credentials. `challenge` is the WWW-Authenticate value the client is owed
    (RFC 9110 §11.6.1)."""

    status, slug, title = 401, "unauthorized", "Authentication required"

    def __init__(self, detail: str, *, challenge: str, **extensions: Any) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": challenge}, **extensions)


class Forbidden(GpuhealthError):
    status, slug, title = 403, "forbidden", "Not permitted"


class NotFound(GpuhealthError):
    status, slug, title = 404, "not-found", "Not found"


class Conflict(GpuhealthError):
    status, slug, title = 409, "conflict", "Conflict"


class PayloadTooLarge(GpuhealthError):
    status, slug, title = 413, "payload-too-large", "Request body too large"


class UnsupportedMediaType(GpuhealthError):
    status, slug, title = 415, "unsupported-media-type", "Unsupported media type"


class Unprocessable(GpuhealthError):
    status, slug, title = 422, "unprocessable", "Request not valid"


class TooManyRequests(GpuhealthError):
    """Over a rate limit: `retry_after` whole seconds, as the Retry-After header and as an
    extension member."""

    status, slug, title = 429, "rate-limited", "Too many requests"

    def __init__(self, detail: str, *, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)},
                         retry_after=retry_after)


class ServiceUnavailable(GpuhealthError):
    status, slug, title = 503, "unavailable", "Service unavailable"
