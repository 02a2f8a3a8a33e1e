"""Lead-time distributions: time from precursor onset to the terminal event (docs/simulator.md,
`failures`).

Each distribution samples hours and gives its CDF, so tests can check a generated sample
against the configured law. The lognormal is parameterised by its median and 10th/90th
percentiles exactly as docs/simulator.md states them; since those three numbers are not
consistent with one lognormal (2 h-24 h-120 h is not symmetric in log space), it is a split
lognormal: one sigma below the median fitted to p10, another above it fitted to p90. All three
quantiles are exact.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

F64 = npt.NDArray[np.float64]

# Standard-normal quantile at 0.9: z such that Phi(z) = 0.9.
_Z90 = 1.2815515655446004


def _phi(z: F64) -> F64:
    erf = np.frompyfunc(math.erf, 1, 1)
    return np.asarray(0.5 * (1.0 + erf(z / math.sqrt(2.0))), dtype=np.float64)


class LogNormalLead(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dist: Literal["lognormal"] = "lognormal"
    median_h: float = Field(gt=0)
    p10_h: float = Field(gt=0)
    p90_h: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> LogNormalLead:
        if not self.p10_h < self.median_h < self.p90_h:
            raise ValueError("lognormal lead time needs p10_h < median_h < p90_h")
        return self

    @property
    def sigmas(self) -> tuple[float, float]:
        return (math.log(self.median_h / self.p10_h) / _Z90,
                math.log(self.p90_h / self.median_h) / _Z90)

    def sample_h(self, rng: np.random.Generator, n: int) -> F64:
        lo, hi = self.sigmas
        z = rng.standard_normal(n)
        return self.median_h * np.exp(z * np.where(z < 0, lo, hi))

    def cdf(self, hours: F64) -> F64:
        lo, hi = self.sigmas
        x = np.log(np.maximum(np.asarray(hours, dtype=np.float64), 1e-300) / self.median_h)
        return _phi(x / np.where(x < 0, lo, hi))


class ExponentialLead(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dist: Literal["exponential"] = "exponential"
    mean_h: float = Field(gt=0)

    def sample_h(self, rng: np.random.Generator, n: int) -> F64:
        return rng.exponential(self.mean_h, n)

    def cdf(self, hours: F64) -> F64:
        return 1.0 - np.exp(-np.maximum(np.asarray(hours, dtype=np.float64), 0.0) / self.mean_h)


class UniformLead(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dist: Literal["uniform"] = "uniform"
    min_h: float = Field(gt=0)
    max_h: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLead:
        if self.max_h <= self.min_h:
            raise ValueError("uniform lead time needs min_h < max_h")
        return self

    def sample_h(self, rng: np.random.Generator, n: int) -> F64:
        return rng.uniform(self.min_h, self.max_h, n)

    def cdf(self, hours: F64) -> F64:
        h = np.asarray(hours, dtype=np.float64)
        return np.clip((h - self.min_h) / (self.max_h - self.min_h), 0.0, 1.0)


LeadTime = Annotated[LogNormalLead | ExponentialLead | UniformLead, Field(discriminator="dist")]
