"""The one plugin registry (collectors.plugins): names registered once, unknown names answered
with the known ones, configs validated with the bad fields named and never their values, and a
plugin built by its factory from the validated config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from collectors.plugins import Plugin, PluginRegistry, Registry


@dataclass(frozen=True)
class _Entry:
    name: str
    value: int = 0


def test_a_name_is_registered_once() -> None:
    reg = Registry[_Entry]("widget")
    first = reg.register(_Entry("a", 1))
    with pytest.raises(ValueError, match=r"^widget 'a' is already registered$"):
        reg.register(_Entry("a", 2))
    assert reg["a"] is first and reg["a"].value == 1
    reg.register(_Entry("b"))
    assert reg.names() == ["a", "b"] and list(reg) == ["a", "b"] and len(reg) == 2
    assert "a" in reg and "c" not in reg and reg.get("c") is None
    reg.unregister("a")
    assert reg.names() == ["b"]
    reg.register(_Entry("a", 3))  # free again once taken out
    assert reg["a"].value == 3


def test_an_unknown_name_lists_the_known_ones() -> None:
    reg = Registry[_Entry]("widget")
    with pytest.raises(KeyError) as empty:
        reg["x"]
    assert empty.value.args[0] == "unknown widget 'x' (known: none)"
    reg.register(_Entry("zeta"))
    reg.register(_Entry("alpha"))
    with pytest.raises(KeyError) as err:
        reg["x"]
    assert err.value.args[0] == "unknown widget 'x' (known: alpha, zeta)"


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    retries: int = Field(default=1, ge=0)
    password: str = ""


@dataclass
class _Built:
    name: str
    config: _Config


def _registry() -> tuple[PluginRegistry[_Built], list[tuple[str, _Config]]]:
    calls: list[tuple[str, _Config]] = []

    def factory(name: str, config: _Config) -> _Built:
        calls.append((name, config))
        return _Built(name, config)

    reg = PluginRegistry[_Built]("gadget")
    reg.register(Plugin("http", _Config, factory))
    return reg, calls


def test_build_calls_the_factory_with_the_validated_model() -> None:
    reg, calls = _registry()
    built = reg.build("http", {"url": "u", "retries": "3"}, name="mine")
    assert calls == [("mine", _Config(url="u", retries=3))]
    assert built.name == "mine" and isinstance(built.config, _Config)
    assert built.config.retries == 3  # coerced by the model, not passed through
    # An instance without a name of its own is named by its type.
    assert reg.build("http", {"url": "u"}).name == "http"
    assert reg.check("http", {"url": "u"}) is None and reg.check("http", {"url": "u"}, "x") is None
    assert len(calls) == 2  # check builds nothing


@pytest.mark.parametrize(("name", "message"), [
    (None, "unknown gadget 'ftp' (known: http)"),
    ("r1", "gadget 'r1': unknown type 'ftp' (known: http)"),
])
def test_an_unknown_type_names_the_known_ones(name: str | None, message: str) -> None:
    reg, calls = _registry()
    assert reg.check("ftp", {}, name) == message
    with pytest.raises(ValueError) as err:
        reg.build("ftp", {}, name)
    assert str(err.value) == message and calls == []


@pytest.mark.parametrize(("name", "prefix"), [(None, "gadget 'http': "),
                                              ("r1", "gadget 'r1' (http): ")])
def test_a_bad_config_names_the_plugin_and_every_bad_field(name: str | None,
                                                           prefix: str) -> None:
    reg, calls = _registry()
    bad: dict[str, Any] = {"retries": -1, "password": ["hunter2-secret"], "retires": 2}
    problem = reg.check("http", bad, name)
    assert problem is not None and problem.startswith(prefix)
    for field in ("url: Field required", "retries: Input should be greater than or equal to 0",
                  "password: Input should be a valid string", "retires: Extra inputs"):
        assert field in problem, field
    assert "hunter2" not in problem
    with pytest.raises(ValueError) as err:
        reg.build("http", bad, name)
    assert str(err.value) == problem and err.value.__cause__ is None and calls == []

