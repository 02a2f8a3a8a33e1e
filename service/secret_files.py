"""Secret settings read from files: `GPUHEALTH_<PATH>_FILE=/run/secrets/pg_dsn` sets the secret
setting that `GPUHEALTH_<PATH>` names (nested with `__`, like the plain variables) to the file's
content, the way Docker and Compose `secrets:` (mounted under /run/secrets) and Kubernetes secret
volumes deliver a secret, so that it is in no environment, process listing or `docker inspect`.

- Every secret setting (a SecretStr anywhere in the tree) may be read so, and only those: a
  `_FILE` variable under a settings section that names nothing else is refused; a setting whose
  own name ends in `_file` (storage.sqlite_file) is left to the environment as before.
- A receiver's settings are named by the receiver's name, upper-cased, every character other
  than a letter or a digit written `_`: for receiver `oncall`,
  GPUHEALTH_NOTIFY__RECEIVERS__ONCALL__CONFIG__ROUTING_KEY_FILE. A header of a webhook or
  Alertmanager receiver: ...__CONFIG__HEADERS__AUTHORIZATION_FILE (`_` stands for `-`). The
  remediation hook's: GPUHEALTH_REMEDIATION__HOOK_CONFIG__SECRET_FILE.
- The content is taken as it is, less its trailing line ends; a list (ingest.tokens) is one
  entry a line, blank lines skipped. Files over MAX_BYTES and empty files are refused.
- Precedence: a variable and its `_FILE` twin both set is refused (which one was meant is not
  guessed); the file otherwise wins over the settings file, as every variable does.

Errors name the variable and the path, never what the file holds."""

from __future__ import annotations

import copy
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

PREFIX = "GPUHEALTH_"
SUFFIX = "_FILE"
DELIMITER = "__"
MAX_BYTES = 64 * 1024  # a DSN or a key is far less; a list of a thousand tokens fits

Kind = Literal["scalar", "list"]
Key = str | int


class SecretFileError(ValueError):
    """A `_FILE` variable that cannot be honoured."""


@dataclass(frozen=True, slots=True)
class _Target:
    keys: tuple[Key, ...]  # where in the merged settings values
    kind: Kind


_FIELD: Literal["field"] = "field"  # a resolution: an ordinary setting, not a secret
Resolution = _Target | Literal["field"] | None


def _unwrap(tp: Any) -> Any:
    """`tp` without Annotated metadata and without an Optional's None."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    return tp


def _is_secret(tp: Any) -> bool:
    tp = _unwrap(tp)
    return isinstance(tp, type) and issubclass(tp, SecretStr)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _get(state: Any, key: Key) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    if isinstance(state, list) and isinstance(key, int):
        return state[key] if 0 <= key < len(state) else None
    if isinstance(state, BaseModel) and isinstance(key, str):
        return getattr(state, key, None)
    return None


def _env_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "_", name.lower())


def _plugin(model: type[BaseModel], field: str) -> tuple[Mapping[str, Any], str] | None:
    """A free-form section a plugin's own model validates: the plugin registry and the field
    beside it that names the plugin's type (a receiver's config, the remediation hook's)."""
    from service.notify.config import ReceiverSettings
    from service.notify.receivers import RECEIVER_TYPES
    from service.remediation.config import RemediationSettings
    from service.remediation.hooks import HOOK_TYPES

    table: dict[tuple[type[BaseModel], str], tuple[Mapping[str, Any], str]] = {
        (ReceiverSettings, "config"): ({t: RECEIVER_TYPES[t].config for t in RECEIVER_TYPES},
                                       "type"),
        (RemediationSettings, "hook_config"): ({t: HOOK_TYPES[t].config for t in HOOK_TYPES},
                                               "hook"),
    }
    return table.get((model, field))


def _named_items(tp: Any) -> type[BaseModel] | None:
    """The item model of a list of named objects (notify.receivers), else None."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list and args and _is_model(_unwrap(args[0])) and \
            "name" in _unwrap(args[0]).model_fields:
        item: type[BaseModel] = _unwrap(args[0])
        return item
    return None


def _secret_map(tp: Any) -> bool:
    args = typing.get_args(tp)
    return typing.get_origin(tp) is dict and len(args) == 2 and _is_secret(args[1])


def _secret_list(tp: Any) -> bool:
    args = typing.get_args(tp)
    return typing.get_origin(tp) is list and bool(args) and _is_secret(args[0])


def _resolve(model: type[BaseModel], segs: list[str], state: Any,
             keys: tuple[Key, ...] = ()) -> Resolution:
    """What the lower-cased path `segs` names under `model`, `state` being the values so far
    (to find a receiver by its name and a plugin's type)."""
    name, rest = segs[0], segs[1:]
    field: FieldInfo | None = model.model_fields.get(name)
    if field is None:
        return None
    tp, here, sub = _unwrap(field.annotation), (*keys, name), _get(state, name)
    if not rest:
        if _is_secret(tp):
            return _Target(here, "scalar")
        return _Target(here, "list") if _secret_list(tp) else _FIELD
    if _is_model(tp):
        return _resolve(tp, rest, sub, here)
    plugin = _plugin(model, name)
    if plugin is not None:
        configs, type_field = plugin
        type_ = _get(state, type_field) or model.model_fields[type_field].default
        config = configs.get(type_) if isinstance(type_, str) else None
        return None if config is None else _resolve(config, rest, sub, here)
    item = _named_items(tp)
    if item is not None:
        # The next segment is an object's name (a receiver's).
        items = sub if isinstance(sub, list) else []
        found = [i for i, it in enumerate(items) if _env_name(str(_get(it, "name"))) == rest[0]]
        if len(found) != 1 or len(rest) < 2:
            return None
        return _resolve(item, rest[1:], items[found[0]], (*here, found[0]))
    if _secret_map(tp) and len(rest) == 1:
        # A map of secrets (a receiver's headers): an entry already named wins, else `_` is `-`.
        existing = [k for k in (sub or {}) if _env_name(str(k)) == rest[0]]
        key = existing[0] if len(existing) == 1 else rest[0].replace("_", "-")
        return _Target((*here, key), "scalar")
    return None


def read_secret(var: str, path: str) -> str:
    """The file's text less its trailing line ends; SecretFileError names `var` and `path`."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SecretFileError(f"{var}: cannot read {path}: "
                              f"{exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_BYTES:
        raise SecretFileError(f"{var}: {path} is larger than {MAX_BYTES} bytes")
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise SecretFileError(f"{var}: {path} is not UTF-8 text") from None
    if not text.strip():
        raise SecretFileError(f"{var}: {path} is empty")
    return text


def _value(kind: Kind, text: str) -> Any:
    if kind == "list":
        return [line.strip() for line in text.splitlines() if line.strip()]
    return text


def _merge(low: dict[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    """`low` updated by `high`, mappings merged key by key (as pydantic-settings merges)."""
    out = dict(low)
    for k, v in high.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def _pop(values: dict[str, Any], keys: list[str]) -> None:
    """Remove what the environment source made of a `_FILE` variable (it takes it for a
    setting named `..._file`), and the mappings that held only it."""
    trail: list[dict[str, Any]] = [values]
    for k in keys[:-1]:
        nxt = trail[-1].get(k)
        if not isinstance(nxt, dict):
            return
        trail.append(nxt)
    trail[-1].pop(keys[-1], None)
    for holder, k in zip(reversed(trail[:-1]), reversed(keys[:-1]), strict=True):
        if holder.get(k) == {}:
            holder.pop(k)


def _put(values: dict[str, Any], keys: tuple[Key, ...], value: Any) -> None:
    """Set `value` at `keys`, copying what it passes through (the sources' values stay)."""
    node: Any = values
    for k in keys[:-1]:
        nxt = _get(node, k)
        if isinstance(nxt, BaseModel):
            nxt = nxt.model_dump(by_alias=True)
        elif isinstance(nxt, dict | list):
            nxt = copy.copy(nxt)
        else:
            nxt = {}
        node[k] = nxt
        node = nxt
    node[keys[-1]] = value


def _at(values: Mapping[str, Any], keys: list[str]) -> Any:
    node: Any = values
    for k in keys:
        node = node.get(k) if isinstance(node, Mapping) else None
    return node


def _has(values: Mapping[str, Any], keys: tuple[Key, ...]) -> bool:
    node: Any = values
    for k in keys:
        node = _get(node, k)
        if node is None:
            return False
    return True


def _dotted(keys: tuple[Key, ...]) -> str:
    return ".".join(str(k) for k in keys)


def apply(settings_cls: type[BaseModel], env_values: dict[str, Any], below: dict[str, Any],
          environ: Mapping[str, str]) -> dict[str, Any]:
    """The environment's values over `below` (the settings file and overrides), with every
    `_FILE` variable of `environ` read into the secret it names."""
    files: list[tuple[str, str, list[str], list[str]]] = []
    for var, path in sorted(environ.items()):
        upper = var.upper()
        if upper.startswith(PREFIX) and upper.endswith(SUFFIX) and \
                len(upper) > len(PREFIX) + len(SUFFIX):
            segs = upper[len(PREFIX):-len(SUFFIX)].lower().split(DELIMITER)
            if segs[0] in settings_cls.model_fields:  # else not the tree's: ignored, as before
                files.append((var, path, segs, [*segs[:-1], segs[-1] + SUFFIX.lower()]))
    if not files:
        return _merge(below, env_values)
    # The environment source took each for a setting named ..._file: out with those, then
    # back in with the ones that are such a setting (storage.sqlite_file).
    stripped = copy.deepcopy(env_values)
    for *_, own in files:
        _pop(stripped, own)
    merged = _merge(below, stripped)
    secrets = []
    for var, path, segs, own in files:
        if _resolve(settings_cls, own, merged) == _FIELD:
            _put(stripped, tuple(own), _at(env_values, own))
            _put(merged, tuple(own), _at(env_values, own))
        else:
            secrets.append((var, path, segs))
    plain = {name.upper() for name in environ}
    for var, path, segs in secrets:
        target = _resolve(settings_cls, segs, merged)
        if not isinstance(target, _Target):
            raise SecretFileError(
                f"{var}: names no secret setting (a receiver's by its name, e.g. "
                "GPUHEALTH_NOTIFY__RECEIVERS__ONCALL__CONFIG__ROUTING_KEY_FILE; README, "
                "Configuration, lists them)")
        twin = var[:-len(SUFFIX)]
        if twin.upper() in plain:
            raise SecretFileError(f"{twin} and {var} are both set: set one of them")
        if _has(stripped, target.keys):
            raise SecretFileError(f"{var}: the environment sets {_dotted(target.keys)} "
                                  "as well: set one of them")
        _put(merged, target.keys, _value(target.kind, read_secret(var, path)))
    return merged


def secret_variables(settings_cls: type[BaseModel]) -> list[str]:
    """Every secret setting's `_FILE` variable; a receiver's and the hook's for each type
    (<NAME> for the receiver's name, <HEADER> for a header's): for the docs and their test."""
    out: list[str] = []

    def walk(model: type[BaseModel], path: str) -> None:
        for name, field in model.model_fields.items():
            tp = _unwrap(field.annotation)
            here = f"{path}{DELIMITER}{name.upper()}" if path else name.upper()
            plugin, item = _plugin(model, name), _named_items(tp)
            if _is_secret(tp) or _secret_list(tp):
                out.append(f"{PREFIX}{here}{SUFFIX}")
            elif _secret_map(tp):
                out.append(f"{PREFIX}{here}{DELIMITER}<HEADER>{SUFFIX}")
            elif _is_model(tp):
                walk(tp, here)
            elif plugin is not None:
                for type_, config in plugin[0].items():
                    walk(config, f"{here}({plugin[1]}={type_})")
            elif item is not None:
                walk(item, f"{here}{DELIMITER}<NAME>")

    walk(settings_cls, "")
    return out


class SecretFilesSource(PydanticBaseSettingsSource):
    """The environment source over the one below it (the settings file), with the `_FILE`
    variables read in: one source, because a receiver is found by its name in the merged list."""

    def __init__(self, settings_cls: type[BaseSettings], env: PydanticBaseSettingsSource,
                 below: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._env, self._below = env, below

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ builds the whole mapping

    def __call__(self) -> dict[str, Any]:
        return apply(self.settings_cls, self._env(), self._below(), os.environ)
