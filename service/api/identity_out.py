"""A GPU slot's boards as the API shows them (service.stages.gpu_identity)."""

from __future__ import annotations

from service.api.schemas import BoardOut, IdentityOut
from service.stages.gpu_identity import Board, GpuIdentities


def _board(b: Board) -> dict[str, object]:
    return {**b.identity.as_dict(), "since": b.since, "until": b.until, "why": b.why}


def identity_out(identities: GpuIdentities, gpu: str) -> IdentityOut | None:
    """The board in the slot now and those before it, newest first; None before any source
    said the GPU's identity."""
    boards = identities.boards(gpu)
    if not boards:
        return None
    cur = boards[-1]
    return IdentityOut.model_validate({
        **_board(cur), "changed": cur.changed,
        "previous": [BoardOut.model_validate(_board(b)) for b in reversed(boards[:-1])]})
