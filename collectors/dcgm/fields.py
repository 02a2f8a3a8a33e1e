"""DCGM field names onto catalog metrics, built once from each Metric.dcgm spelling.

The catalog spells a DCGM source in three shapes, and each becomes one kind of entry here:

- a plain field, "DCGM_FI_DEV_GPU_TEMP (150)": one GPU metric;
- a bit of a bitmask field, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (112) & 0x40": several 0/1 state
  metrics share the field, each testing its own bit;
- a per-link family, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L<n> (400-405; total 409)": one
  NVLink metric, the link number taken from the field name's `_L<n>` suffix.
"""

from __future__ import annotations

import re

from collectors.catalog import CATALOG, Catalog, Kind, Metric, Scope
from collectors.compat import dataclass

_LINK_SUFFIX = "_L<n>"
_MASK = re.compile(r"&\s*(0x[0-9a-fA-F]+|[0-9]+)")
_PER_LINK = re.compile(r"^(?P<prefix>.+_L)(?P<link>[0-9]+)$")
# NVLink error totals summed over all links. The catalog keeps NVLink errors per link (a single
# bad link is what points at a cable or a switch port); a GPU-wide sum has no home there.
_LINK_TOTAL = re.compile(r"^DCGM_FI_DEV_NVLINK_.+_TOTAL$")


@dataclass(frozen=True, slots=True)
class Target:
    """Where one DCGM field (or one bit of it) lands: a catalog metric, and the bit to test."""

    metric: Metric
    mask: int | None = None  # bitmask fields: the metric is 1 when (value & mask) != 0


@dataclass(frozen=True, slots=True)
class Lookup:
    """A DCGM field resolved: its targets, and the NVLink link number for per-link fields."""

    targets: tuple[Target, ...]
    link: int | None = None


class FieldMap:
    """DCGM field name -> catalog targets, for the metrics of `catalog` that name a DCGM field."""

    def __init__(self, catalog: Catalog = CATALOG) -> None:
        plain: dict[str, list[Target]] = {}
        per_link: dict[str, list[Target]] = {}
        for m in catalog:
            name = m.dcgm_name
            if name is None or m.derived:
                continue
            if name.endswith(_LINK_SUFFIX):
                if m.scope is not Scope.NVLINK:
                    raise ValueError(f"{m.name}: per-link DCGM field on a {m.scope} metric")
                per_link.setdefault(name[: -len(_LINK_SUFFIX)] + "_L", []).append(Target(m))
                continue
            assert m.dcgm is not None
            found = _MASK.search(m.dcgm)
            mask = None if found is None else int(found.group(1), 0)
            if mask is not None and m.kind is not Kind.STATE:
                raise ValueError(f"{m.name}: a bitmask DCGM field must feed a state metric")
            plain.setdefault(name, []).append(Target(m, mask))
        self._plain = {k: tuple(v) for k, v in plain.items()}
        self._per_link = {k: tuple(v) for k, v in per_link.items()}

    def lookup(self, field: str) -> Lookup | None:
        """The targets of a DCGM field name, or None when the catalog has no home for it."""
        targets = self._plain.get(field)
        if targets is not None:
            return Lookup(targets)
        m = _PER_LINK.match(field)
        if m is not None:
            targets = self._per_link.get(m["prefix"])
            if targets is not None:
                return Lookup(targets, int(m["link"]))
        return None

    @staticmethod
    def is_link_total(field: str) -> bool:
        return _LINK_TOTAL.match(field) is not None

    def names(self) -> frozenset[str]:
        """Every field name this map knows; per-link families as their `..._L<n>` spelling."""
        return frozenset(self._plain) | frozenset(p + "<n>" for p in self._per_link)


FIELDS = FieldMap()
