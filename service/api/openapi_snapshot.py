"""Write the OpenAPI document as the snapshot committed under docs/ (or to stdout):

    python -m service.api.openapi_snapshot docs/openapi.json

Apart from service.api.openapi, which the app imports, so that this import of the app makes
no cycle."""

from __future__ import annotations

import sys
from pathlib import Path

from service.api.app import create_app
from service.api.openapi import render


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render(create_app())
    if args:
        Path(args[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
