"""The one wording of a pydantic validation error (service.errors.field_errors): the field path
and the reason, one entry per problem, never the input (it may be a secret)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from service.errors import field_errors


class Inner(BaseModel):
    port: int


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    password: int
    inner: Inner

    @model_validator(mode="after")
    def _whole(self) -> Config:
        if self.password == self.inner.port:
            raise ValueError("password and port must differ")
        return self


def _error(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        Config.model_validate(data)
    return info.value


def test_each_problem_names_its_field_and_never_the_input() -> None:
    got = field_errors(_error({"password": "hunter2", "inner": {"port": "x"}, "typo": "s3"}),
                       "(config)")
    assert got == ["password: Input should be a valid integer, unable to parse string as an "
                   "integer",
                   "inner.port: Input should be a valid integer, unable to parse string as an "
                   "integer",
                   "typo: Extra inputs are not permitted"]
    assert not any("hunter2" in line or "s3" in line for line in got)


def test_a_problem_with_the_whole_object_takes_the_callers_name() -> None:
    assert field_errors(_error({"password": 7, "inner": {"port": 7}}), "(settings)") == [
        "(settings): Value error, password and port must differ"]
