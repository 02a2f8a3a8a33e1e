"""`gpuhealth route-test`: which receivers an alert with given labels would reach, through
which route, in which group and with which timers (like `amtool config routes test`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from service.commands.cli import register
from service.commands.usage import UsageError, load_settings
from service.notify.message import LEVEL_SEVERITY
from service.notify.routing import Route


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("labels", nargs="+", metavar="NAME=VALUE",
                   help="the alert's labels, e.g. level=3 node=n0012 scope=gpu "
                        "alertname=GpuFailureRisk")
    p.add_argument("--config", type=Path, help="settings file (default: $GPUHEALTH_CONFIG)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _run(args: argparse.Namespace) -> int:
    labels: dict[str, str] = {}
    for item in args.labels:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{item!r} is not NAME=VALUE (e.g. level=3 node=n0012)")
        labels[name] = value
    if "level" in labels and "severity" not in labels:
        level = labels["level"]
        known = level.isascii() and level.isdigit() and len(level) < 4  # not `²`, not 10**9
        labels["severity"] = LEVEL_SEVERITY.get(int(level) if known else 0, "info")
    settings = load_settings(args.config)
    route = Route.build(settings.notify.route)
    hits: list[dict[str, Any]] = []
    for r in route.match(labels):
        key, glabels = r.group_key(labels)
        hits.append({"receiver": r.receiver, "route": r.id,
                     "matchers": [str(m) for m in r.matchers], "group_key": key,
                     "group_labels": glabels, "group_wait_s": r.group_wait_s,
                     "group_interval_s": r.group_interval_s,
                     "repeat_interval_s": r.repeat_interval_s})
    if args.json:
        print(json.dumps({"labels": labels, "routes": hits}, indent=2))
        return 0
    print(", ".join(h["receiver"] for h in hits))  # amtool prints the receivers first
    for h in hits:
        print(f"  route {h['route']} {h['matchers'] or '(root)'} -> {h['receiver']}: group "
              f"{h['group_labels']}, wait {h['group_wait_s']:g} s, interval "
              f"{h['group_interval_s']:g} s, repeat {h['repeat_interval_s']:g} s")
    return 0


register("route-test", _configure, _run,
         help="show which receivers an alert with the given labels would reach")
