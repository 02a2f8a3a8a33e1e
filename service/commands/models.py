"""`gpuhealth model list|shadow|compare|promote|rollback|stop`: the model registry in the
service's SQLite file (service.learning.model_registry), so a change made here is followed by the
running service at its next model check (detectors.model.recheck_s). `gpuhealth labels export`
writes the labels learned from the fleet as a labels.jsonl that `gpuhealth train` reads.

Promotion and rollback are admin acts: whoever can run this command can write the service's
files. Each is audited with the local user's name (`cli:<user>`)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from service.commands.cli import global_options, register
from service.commands.usage import load_settings


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False, parents=[global_options()])
    common.add_argument("--config", type=Path,
                        help="settings file (YAML); default $GPUHEALTH_CONFIG")
    return common


def _configure(p: argparse.ArgumentParser) -> None:
    common = _common()
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = sub.add_parser("list", parents=[common], help="the active model, a challenger, the audit")
    ls.add_argument("--json", action="store_true")
    sh = sub.add_parser("shadow", parents=[common],
                        help="run an artifact in shadow beside the active model")
    sh.add_argument("path", type=Path, help="artifact directory (gpuhealth train --out)")
    cmp = sub.add_parser("compare", parents=[common],
                         help="the active model and the challenger side by side")
    cmp.add_argument("--json", action="store_true")
    pr = sub.add_parser("promote", parents=[common], help="make the challenger active")
    pr.add_argument("--force", action="store_true", help="even when it is worse")
    pr.add_argument("--reason", default="")
    rb = sub.add_parser("rollback", parents=[common],
                        help="make the model active before the last change active again")
    rb.add_argument("--reason", default="")
    st = sub.add_parser("stop", parents=[common], help="end the shadow run, no promotion")
    st.add_argument("--reason", default="")


def _fail(msg: str) -> int:
    print(f"gpuhealth model: {msg}", file=sys.stderr)
    return 2


def _iso(ts: float | None) -> str:
    return "-" if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _current(settings: Any, registry: Any) -> tuple[str, str]:
    """(version, path) of the active model: the registry's, else the settings' artifact."""
    from service.learning.promotion import artifact_version

    active = registry.active()
    if active is not None:
        return active.version, active.path
    path = settings.detectors.model.resolved()
    if path is None:
        return "", ""
    try:
        return artifact_version(path), str(path.resolve())
    except (OSError, ValueError):
        return "", str(path)


def _run(args: argparse.Namespace) -> int:
    from service.learning import promotion
    from service.learning.model_registry import ModelRegistry, RegistryError
    from service.stages.label_store import LabelStore

    settings = load_settings(args.config)
    db = settings.storage.state_target
    registry, labels = ModelRegistry(db), LabelStore(db)
    actor, now = f"cli:{getpass.getuser()}", time.time()
    policy = settings.detectors.model.promotion
    try:
        current = _current(settings, registry)
        if args.action == "shadow":
            try:
                e = promotion.shadow(registry, args.path, actor, now)
            except (OSError, ValueError) as exc:
                return _fail(f"{args.path}: {exc}")
            print(f"{e.version} is in shadow beside {current[0] or 'no model'}; the service "
                  f"starts it within {settings.detectors.model.recheck_s:g} s")
        elif args.action in ("list", "compare"):
            out = promotion.compare(registry, labels, policy, now, current)
            if args.action == "list":
                out = {k: out[k] for k in ("active", "challenger", "run")} | {
                    "audit": [a.as_dict() for a in registry.audit(20)]}
            if args.json:
                print(json.dumps(out, indent=2, default=str))
            else:
                _print(out, args.action)
        elif args.action == "promote":
            e = promotion.promote(registry, labels, policy, actor=actor, force=args.force,
                                  reason=args.reason, now=now, current=current)
            print(f"promoted {e.version} (was {current[0] or 'no model'}); "
                  "`gpuhealth model rollback` returns to it")
        elif args.action == "rollback":
            e = promotion.rollback(registry, actor=actor, reason=args.reason, now=now,
                                   current=current)
            print(f"rolled back to {e.version} (was {current[0]})")
        else:
            e = registry.stop(actor, now, args.reason)
            print(f"stopped the shadow run of {e.version}")
    except RegistryError as exc:
        return _fail(str(exc))
    finally:
        registry.close()
        labels.close()
    return 0


def _print(out: dict[str, Any], action: str) -> None:
    ch, run = out["challenger"], out["run"]
    print(f"active:     {out['active']['version'] or 'no model'}  {out['active']['path']}")
    print(f"challenger: {ch['version'] + '  ' + ch['path'] if ch else 'none'}")
    if run is not None:
        print(f"shadow run {run['id']}: {run['outcome']}, {_iso(run['started_at'])} to "
              f"{_iso(run['ended_at'] or run['updated_at'])}, {run['node_days']:.1f} node-days")
    if action == "list":
        for a in out["audit"]:
            why = f": {a['reason']}" if a["reason"] else ""
            print(f"  {_iso(a['at'])} {a['actor']}: {a['action']} {a['version']}"
                  f"{' (forced)' if a['forced'] else ''}{why}")
        return
    board = out.get("scores")
    if not board:
        return
    pol = out["policy"]
    rows = [("", "view", "failures", "detected", "false alarms", "precision", "recall",
             "F1", "FA/1k node-days", "median lead h")]
    for stream, views in board.items():
        for view, s in views.items():
            lead = (s.get("lead") or {}).get("median_h")
            rows.append((stream, view, str(s["failures"]), str(s["detected"]),
                         str(s["false_alarms"]), _n(s["precision"]), _n(s["recall_all"]),
                         _n(s["f1_all"]), _n(s["fa_per_1000_node_days"]), _n(lead)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    j = out["judgement"]
    print(f"promotion ({pol['stream']} at {pol['view']}): "
          + ("the challenger is at least as good" if j["better"] else
             "refused unless forced: " + "; ".join(j["reasons"])))


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _configure_labels(p: argparse.ArgumentParser) -> None:
    common = _common()
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ex = sub.add_parser("export", parents=[common],
                        help="write the labels as labels.jsonl (docs/trace-format.md)")
    ex.add_argument("--out", type=Path, required=True, help="file to write")
    ex.add_argument("--since", help="epoch seconds or RFC 3339 (default: all)")
    ex.add_argument("--until", help="epoch seconds or RFC 3339 (default: now)")
    ex.add_argument("--all", action="store_true",
                    help="keep auto failures an operator called a false alarm or maintenance")
    sub.add_parser("counts", parents=[common], help="failure labels per mode")


def _run_labels(args: argparse.Namespace) -> int:
    from collectors.labels import dump_labels
    from service.history.history import QueryError, parse_time
    from service.stages.label_store import LabelStore

    try:
        since = None if getattr(args, "since", None) is None else parse_time(args.since)
        until = None if getattr(args, "until", None) is None else parse_time(args.until)
    except QueryError as exc:
        print(f"gpuhealth labels: {exc}", file=sys.stderr)
        return 2
    store = LabelStore(load_settings(args.config).storage.state_target)
    try:
        if args.action == "counts":
            print(json.dumps(store.counts(), indent=2, sort_keys=True))
            return 0
        found = store.find(since=since, until=until, overruled=args.all, limit=10_000_000)
        dump_labels((lb.label() for lb in found), args.out)
        print(f"{len(found)} labels written to {args.out}", file=sys.stderr)
    finally:
        store.close()
    return 0


register("model", _configure, _run,
         "the active model, a challenger in shadow, promotion and rollback")
register("labels", _configure_labels, _run_labels,
         "labels learned from the fleet (hard failures, repairs, verdicts): export, counts")
