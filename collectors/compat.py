"""Python 3.9 stand-ins for the few 3.10/3.11 features the collectors use, so the node agent's
modules run on the Python that GPU nodes ship (Ubuntu 22.04 and DGX OS 6 have 3.10; issue 33)
while the server keeps 3.11. On 3.11 each name is the standard one.

- `dataclass`: the standard decorator; below 3.10 it drops `slots=` (3.10), so the class keeps
  a __dict__ there and is otherwise the same.
- `StrEnum` (3.11): a str Enum whose str() and format() are the value, as enum.StrEnum.
- `UTC` (datetime.UTC, 3.11): datetime.timezone.utc.
- `zip_strict`: zip(..., strict=True) (3.10), which raises ValueError when the iterables'
  lengths differ.

tests/collectors/agent/test_agent_py39.py checks the agent's modules with vermin for 3.9 and
runs the agent with these stand-ins.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Iterable, Iterator
from datetime import timezone
from typing import TYPE_CHECKING, Any, TypeVar, overload

__all__ = ["UTC", "StrEnum", "dataclass", "zip_strict"]

_A = TypeVar("_A")
_B = TypeVar("_B")
_C = TypeVar("_C")
_D = TypeVar("_D")

UTC = timezone.utc  # datetime.UTC is 3.11

def _dataclass39(cls: Any = None, /, *, slots: bool = False, **kwargs: Any) -> Any:
    """dataclasses.dataclass without `slots=` (3.10)."""
    return dataclasses.dataclass(**kwargs) if cls is None else dataclasses.dataclass(cls, **kwargs)


class _StrEnum39(str, enum.Enum):
    """enum.StrEnum as 3.11 has it: members are their values, also in str() and format();
    auto() gives the lower-cased name."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last: list[Any]) -> str:
        return name.lower()


if TYPE_CHECKING or sys.version_info >= (3, 10):
    from dataclasses import dataclass
else:
    dataclass = _dataclass39

if TYPE_CHECKING or sys.version_info >= (3, 11):
    from enum import StrEnum  # novermin (3.11, as the condition says)
else:
    StrEnum = _StrEnum39


@overload
def zip_strict(a: Iterable[_A], b: Iterable[_B], /) -> Iterator[tuple[_A, _B]]: ...
@overload
def zip_strict(a: Iterable[_A], b: Iterable[_B], c: Iterable[_C], /
               ) -> Iterator[tuple[_A, _B, _C]]: ...
@overload
def zip_strict(a: Iterable[_A], b: Iterable[_B], c: Iterable[_C], d: Iterable[_D], /
               ) -> Iterator[tuple[_A, _B, _C, _D]]: ...
def zip_strict(*its: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    if sys.version_info >= (3, 10):
        return zip(*its, strict=True)  # novermin (3.10, as the condition says)
    return _zip_checked(*its)


def _zip_checked(*its: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """zip(strict=True) for 3.9: the tuples, then ValueError if one iterable ran out first."""
    iters = [iter(i) for i in its]
    while True:
        row = []
        for n, it in enumerate(iters):
            try:
                row.append(next(it))
            except StopIteration:
                if n == 0 and all(_exhausted(rest) for rest in iters[1:]):
                    return
                raise ValueError(f"zip_strict: argument {n + 1} has a different length "
                                 f"from the others") from None
        yield tuple(row)


def _exhausted(it: Iterator[Any]) -> bool:
    try:
        next(it)
    except StopIteration:
        return True
    return False
