"""The one way gpuhealth talks to a Kubernetes API server, shared by the cordon/evict hook
(hooks/kubernetes.py) and the diagnostics site (service/diagnostics/kubernetes_site.py): where
the credentials come from (an explicit URL, a kubeconfig, the pod's service account), the
per-call timeout, how an API error is worded, which answers a retry may help, and the record
of every call made (one Step each, for the audit).

The `kubernetes` client is only used inside these modules."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import urllib3.exceptions
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from pydantic import BaseModel, ConfigDict, Field, model_validator

from service.remediation.hooks.base import Step

MAX_DETAIL = 300
# What a failed call raises: an answer from the API server, or no answer at all.
API_ERRORS = (ApiException, urllib3.exceptions.HTTPError)

T = TypeVar("T")


class KubeConnection(BaseModel):
    """Which cluster, with which credentials; the first fields of every config that calls
    the API (extra fields forbidden, so a typo is an error at load time)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubeconfig: str | None = None  # path; None: $KUBECONFIG or ~/.kube/config
    context: str | None = None
    in_cluster: bool = False  # the pod's service account
    host: str | None = None  # an explicit API URL, no credentials (tests, `kubectl proxy`)
    request_timeout_s: float = Field(default=15.0, gt=0, le=120)  # per API call

    @model_validator(mode="after")
    def _one_source(self) -> KubeConnection:
        if self.host and (self.in_cluster or self.kubeconfig or self.context):
            raise ValueError("host excludes in_cluster, kubeconfig and context")
        if self.in_cluster and (self.kubeconfig or self.context):
            raise ValueError("in_cluster excludes kubeconfig and context")
        return self


def make_api_client(config: KubeConnection, who: str = "kubernetes hook") -> k8s.ApiClient:
    """An ApiClient for the configured cluster; ValueError when its credentials cannot be
    loaded (so a bad config fails at load time). `who` starts the error message."""
    conf = k8s.Configuration()
    if config.host:
        conf.host = config.host
        return k8s.ApiClient(conf)
    try:
        if config.in_cluster:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=conf)
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=config.kubeconfig, context=config.context,
                client_configuration=conf)
    except (ConfigException, OSError) as exc:
        where = "in-cluster service account" if config.in_cluster else (
            f"kubeconfig {config.kubeconfig or '(default)'}")
        raise ValueError(f"{who}: cannot load the {where}: {exc}") from None
    return k8s.ApiClient(conf)


def api_error(exc: ApiException) -> str:
    """The Status message the API server sent, else the HTTP reason."""
    try:
        message = json.loads(exc.body or "").get("message")
    except (ValueError, AttributeError):
        message = None
    text = f"HTTP {exc.status}: {message or exc.reason or ''}".strip()
    return text[:MAX_DETAIL]


def error_text(exc: Exception) -> str:
    """A failed call in words: the API server's answer, or what went wrong on the way."""
    if isinstance(exc, ApiException):
        return api_error(exc)
    return f"network error: {type(exc).__name__}: {exc}"[:MAX_DETAIL]


def transient_status(status: int | None) -> bool:
    """Whether a retry may help: no answer, 429, or a 5xx other than 500 (which the API
    server sends for what will fail again, e.g. an eviction under two budgets)."""
    return status is None or status == 429 or (status >= 500 and status != 500)


@dataclass
class CallLog:
    """The API calls made so far, one Step each."""

    steps: list[Step] = field(default_factory=list)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one API call and record its Step; exceptions pass through, recorded."""
        start = time.monotonic()
        try:
            result = fn()
        except API_ERRORS as exc:
            self.steps.append(Step(call=what, ok=False, detail=error_text(exc),
                                   duration_s=time.monotonic() - start))
            raise
        self.steps.append(Step(call=what, duration_s=time.monotonic() - start))
        return result

    def note(self, detail: str) -> None:
        """Add what was learnt to the last call's Step."""
        self.steps[-1] = replace(self.steps[-1], detail=detail[:MAX_DETAIL * 3])
