"""The soak's identity invariants (issue 33): every GPU a source reads has its board (UUID,
and serial where the source says one) on `/v1/gpus/{gpu}`, and the GPU whose board the plan
swaps shows the new board with the old one before it, said as a swap."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from bench.soak_verdict import Check

# What each source says of a board: dcgm-exporter's default labels carry no serial.
SAYS_SERIAL = {"dcgm": False}


def boards(url: str, fleet: Mapping[str, tuple[str, str, str]], swapped: str) -> list[Check]:
    """`fleet`: GPU key -> (its board's UUID now, its serial, the source reading it), for the
    GPUs a source lists now; `swapped`: the GPU whose board the plan replaced ("" = none)."""
    wrong: list[str] = []
    got: dict[str, Any] = {}
    with httpx.Client(timeout=15.0) as client:
        for key in sorted(fleet):
            r = client.get(f"{url}/v1/gpus/{key}")
            got[key] = r.json().get("identity") if r.status_code == 200 else None
    for key, (uuid, serial, source) in sorted(fleet.items()):
        ident = got[key]
        if ident is None:
            wrong.append(f"{key}: no board")
        elif ident.get("uuid") != uuid:
            wrong.append(f"{key}: UUID {ident.get('uuid')} (sent {uuid})")
        elif SAYS_SERIAL.get(source, True) and ident.get("serial") != serial:
            wrong.append(f"{key}: serial {ident.get('serial')} (sent {serial})")
    out = [Check("boards: every GPU's board in the API", not wrong,
                 f"{len(fleet) - len(wrong)} of {len(fleet)}", "; ".join(wrong[:5]))]
    if swapped:
        ident = got.get(swapped) or {}
        before = ident.get("previous") or []
        why = str(ident.get("why", ""))
        ok = bool(before) and why.startswith("swapped")
        out.append(Check("boards: the swapped GPU shows its new board and the old one", ok,
                         f"{len(before)} earlier board(s)",
                         f"{swapped}: {why or 'no board'}"))
    return out
