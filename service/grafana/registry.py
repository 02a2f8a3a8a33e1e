"""The dashboards gpuhealth ships, each written to dashboards/<uid>.json."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from service.grafana import alerts, fabric, fleet, node
from service.grafana.panels import Json

DASHBOARD_DIR = Path(__file__).resolve().parents[2] / "dashboards"
BUILDERS: tuple[Callable[[], Json], ...] = (fleet.build, node.build, fabric.build, alerts.build)


def build_all() -> dict[str, Json]:
    """File name -> dashboard JSON model, in menu order. Refuses two dashboards with one uid."""
    out: dict[str, Json] = {}
    for build in BUILDERS:
        d = build()
        name = f"{d['uid']}.json"
        if name in out:
            raise ValueError(f"two dashboards with uid {d['uid']!r}")
        out[name] = d
    return out


def render(dashboard: Json) -> str:
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"
