"""Generate docs/runbooks.md from the runbook registry (service.notify.runbooks), the text
`GET /v1/runbooks/{alertname}` serves.

`python -m service.commands.runbooks_doc` rewrites the page; `--check` only compares and exits 1
when it is stale. The page is a pure function of the registry, so the check is exact."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from service.notify.runbooks import RUNBOOKS, Runbook, markdown

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "runbooks.md"

_TOP = """\
# Runbooks

<!-- Generated from service/notify/runbooks.py by `python -m service.commands.runbooks_doc`;
do not edit. -->

What each alert means, what to check and what to do: every alertname gpuhealth raises and every
alert of the Prometheus rules it ships (`dashboards/prometheus/rules.yml`). The service serves
the same text at `GET /v1/runbooks/{alertname}` (HTML, or markdown with
`Accept: text/markdown`), and every alert's `runbook_url` annotation points there:
`{external_url}/v1/runbooks/{alertname}`. Which path raises each alert, and its labels, is in
[alertmanager.md](alertmanager.md).

"""


def render_runbooks_md(books: Mapping[str, Runbook] = RUNBOOKS) -> str:
    order = sorted(books.values(), key=lambda b: (b.source != "gpuhealth", b.name))
    rows = ["| Alert | Raised by | Severity |", "|---|---|---|"]
    rows += [f"| [`{b.name}`](#{b.name.lower()}) | {b.source} | {b.severity} |" for b in order]
    sections = "\n".join(markdown(b, heading="##") for b in order)
    return _TOP + "\n".join(rows) + "\n\n" + sections


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/runbooks.md from the registry.")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the page differs from the registry; write nothing")
    parser.add_argument("--output", type=Path, default=DOC_PATH, help="file to write or check")
    args = parser.parse_args(argv)
    text = render_runbooks_md()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
        if current != text:
            print(f"{args.output} is stale: run `python -m service.commands.runbooks_doc`",
                  file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
