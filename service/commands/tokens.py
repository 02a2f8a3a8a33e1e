"""`gpuhealth token create|list|revoke`: the API's bearer tokens (service.api.auth), in the
shared state (storage.state_target: the service's SQLite file, or PostgreSQL when
storage.postgres.dsn is set), so a token made here works for the running service at once.

A token is printed once, alone on stdout (scripts capture it); what it is and the warning to
keep it go to stderr. Nothing else ever shows a secret: only its hash is stored."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from service.commands.cli import global_options, register
from service.commands.usage import load_settings

if TYPE_CHECKING:  # the API's imports wait until a token command runs
    from service.api.auth import Token

_DAY_S = 86400.0


def _configure(p: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False, parents=[global_options()])
    common.add_argument("--config", type=Path,
                        help="settings file (YAML); default $GPUHEALTH_CONFIG")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = sub.add_parser("create", parents=[common], help="make a token and print it once")
    create.add_argument("--name", required=True, help="who or what the token is for")
    # Checked by _run rather than `choices`, for one line and exit code 2 (not usage text).
    create.add_argument("--scope", required=True, help="read, operate or admin")
    create.add_argument("--expires-days", type=float, metavar="D",
                        help="expire D days from now (default: never)")
    ls = sub.add_parser("list", parents=[common], help="list tokens (never their secrets)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    revoke = sub.add_parser("revoke", parents=[common], help="revoke a token at once")
    revoke.add_argument("id", help="the token id (as `token list` shows it)")


def _fail(msg: str) -> int:
    print(f"gpuhealth token: {msg}", file=sys.stderr)
    return 2


def _iso(ts: float | None, none: str = "-") -> str:
    return none if ts is None else datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _run(args: argparse.Namespace) -> int:
    from service.api.auth import TokenStore
    from service.api.principals import Permission

    now = time.time()
    scope: Permission | None = None
    expires_at: float | None = None
    if args.action == "create":  # refuse bad input before opening anything
        try:
            scope = Permission.parse(args.scope)
        except ValueError as exc:
            return _fail(str(exc))
        if not args.name.strip():
            return _fail("--name must not be empty")
        if args.expires_days is not None:
            if not args.expires_days > 0:
                return _fail("--expires-days must be more than 0")
            expires_at = now + args.expires_days * _DAY_S
    store = TokenStore(load_settings(args.config).storage.state_target)
    try:
        if args.action == "create":
            assert scope is not None
            token, secret = store.create(args.name.strip(), scope, now, expires_at)
            print(f"created token {token.id} ({token.name}, scope {token.scope}, expires "
                  f"{_iso(token.expires_at, 'never')}). Store it now: it is shown only once "
                  f"and cannot be recovered.", file=sys.stderr)
            print(secret)
        elif args.action == "list":
            tokens = store.list()
            if args.json:
                print(json.dumps([t.as_dict() for t in tokens], indent=2))
            else:
                _print_table(tokens, now)
        else:
            got = store.revoke(args.id, now)
            if got is None:
                return _fail(f"no token with id {args.id!r} (see `gpuhealth token list`)")
            print(f"revoked token {got.id} ({got.name}) at {_iso(got.revoked_at)}")
    finally:
        store.close()
    return 0


def _print_table(tokens: list[Token], now: float) -> None:
    rows = [("ID", "NAME", "SCOPE", "STATE", "CREATED", "EXPIRES", "LAST USED")]
    for t in tokens:
        state = ("revoked" if t.revoked_at is not None
                 else "active" if t.active(now) else "expired")
        rows.append((t.id, t.name, str(t.scope), state, _iso(t.created_at),
                     _iso(t.expires_at, "never"), _iso(t.last_used_at)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


register("token", _configure, _run, "create, list and revoke API bearer tokens")
