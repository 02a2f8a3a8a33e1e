"""Reading one Redfish member: the enums, numbers and ids the standard defines, each refused on
its own with a reason (a BMC's odd sensor costs that reading, never the node).

Enums from the DMTF Resource schema (DSP0266 bundle, Resource.v1_x): `Status.Health` is OK,
Warning or Critical; `Status.State` is Enabled, Disabled, StandbyOffline, StandbySpare, InTest,
Starting, Absent, UnavailableOffline, Deferring, Quiesced, Updating, Qualified, Degraded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from collectors.compat import dataclass
from collectors.frames import Rejection, name_problem

HEALTH = {"OK": 0, "Warning": 1, "Critical": 2}
# psu_state (the agreed schema): 0 delivering, 1 standby by design, 2 absent, 3 anything else
# (not delivering and not by design).
PSU_STATE = {"Enabled": 0, "StandbySpare": 1, "StandbyOffline": 1, "Absent": 2}
PSU_STATE_OTHER = 3
_BAD_ID = re.compile(r"[^A-Za-z0-9_.-]+")
MAX_ID = 63  # one label of the name grammar


@dataclass(slots=True)
class Skips:
    """What a read refused, one item per sensor or member, with the reason; `notes` are states
    an operator should know that are not errors (an absent fan, a redundancy group not in use)."""

    host: str
    rejected: list[Rejection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def skip(self, where: str, reason: str, metric: str | None = None) -> None:
        self.rejected.append(Rejection(f"{where}: {reason}", None, self.host, metric))


def obj(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def members(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def number(value: Any) -> float | str | None:
    """A finite reading, None when absent or null, or why it is refused (str). Numeric strings
    are read: some BMCs send "2100" where the schema says number."""
    if value is None:
        return None
    if isinstance(value, bool):
        return f"{value!r} is not a number"
    if isinstance(value, (int, float)):
        f = float(value)
    elif isinstance(value, str):
        try:
            f = float(value.strip()[:40])
        except ValueError:
            return f"{value[:40]!r} is not a number"
    else:
        return f"a {type(value).__name__} is not a number"
    return f if math.isfinite(f) else f"{value!r} is not finite"


def put_number(fields: dict[str, float | int], metric: str, value: Any, where: str,
               skips: Skips, what: str) -> None:
    """fields[metric] = the number in `value`; a missing or null member is skipped with why."""
    v = number(value)
    if isinstance(v, float):
        fields[metric] = v
    else:
        skips.skip(where, f"{what} {'is missing or null' if v is None else v}", metric)


def status(member: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(State, Health) of a member's Status; None for each one missing, null or not a string."""
    st = obj(member.get("Status"))
    if st is None:
        return None, None
    state, health = st.get("State"), st.get("Health")
    return (state if isinstance(state, str) else None,
            health if isinstance(health, str) else None)


def put_health(fields: dict[str, float | int], metric: str, member: Mapping[str, Any],
               where: str, skips: Skips) -> None:
    _, health = status(member)
    if health is None:
        skips.skip(where, "Status.Health is missing or null", metric)
    elif health in HEALTH:
        fields[metric] = HEALTH[health]
    else:
        skips.skip(where, f"Status.Health {health[:40]!r} is not OK, Warning or Critical", metric)


def member_id(member: Mapping[str, Any], index: int) -> str:
    """A sensor's id in the name grammar: MemberId (array members) or Id (resources), with
    characters outside it replaced by '_'; its position when it has neither."""
    for key in ("MemberId", "Id"):
        raw = member.get(key)
        if isinstance(raw, (str, int)) and not isinstance(raw, bool):
            text = _BAD_ID.sub("_", str(raw)).strip("._-")[:MAX_ID]
            if text and name_problem(text) is None:
                return text
    return str(index)
