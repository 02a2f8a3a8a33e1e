"""`python -m service.grafana` (`make dashboards`): write the dashboards' JSON into dashboards/;
`--check` only says whether the committed files are what the code generates."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from service.grafana.registry import DASHBOARD_DIR, build_all, render


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.grafana",
                                     description="Regenerate the Grafana dashboards.")
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if a file differs from the generator")
    parser.add_argument("--output", type=Path, default=DASHBOARD_DIR, help="directory")
    args = parser.parse_args(argv)
    out: Path = args.output
    stale = []
    for name, dashboard in build_all().items():
        path = out / name
        text = render(dashboard)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
            continue
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if stale:
        print(f"stale dashboards (run `python -m service.grafana`): {', '.join(stale)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
