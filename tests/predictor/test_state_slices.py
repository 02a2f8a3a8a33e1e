"""The first scored hour computes the LSTM's two chunk states from the whole window a slice of
entities at a time (`stateful.STATE_CHUNK`), and the hour cache moves its window on in place a
slice at a time (`hour_cache.SHIFT_CHUNK`), so neither holds a second fleet-sized array: at
10,000 GPUs the gates over 48 hours were about 240 MB at once, the new window beside the held
one 73 MB. The numbers must not move: the whole-batch computation before, kept here as the
reference, is compared with the sliced one bit for bit over randomized inputs with NaNs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch

from collectors.catalog import Scope
from models.predictor import hour_cache, stateful
from models.predictor.chunks import restart_of
from models.predictor.package import Predictor
from models.predictor.stateful import ChunkStates, Stateful
from tests.predictor import test_hour_cache

F32 = npt.NDArray[np.float32]


def _old_first_run(rt: Stateful, hourly: F32, last: int, p: int
                   ) -> tuple[F32, torch.Tensor, torch.Tensor]:
    """ChunkStates.raw's recomputation from the window before it was sliced, verbatim."""
    model = rt.model
    model.eval()
    with torch.inference_mode():
        x = torch.from_numpy(rt.scaler.apply(hourly))
        n, hid = x.shape[0], model.lstm.hidden_size
        h = torch.zeros(2, n, hid)
        c = torch.zeros(2, n, hid)
        for parity in (0, 1):
            start = hourly.shape[1] - 1 - (last - restart_of(last, p, parity))
            if start < hourly.shape[1] and n:
                h[parity], c[parity] = model.step(x[:, max(start, 0):], (h[parity], c[parity]))
        older = 0 if restart_of(last, p, 0) < restart_of(last, p, 1) else 1
        x_last = torch.from_numpy(rt.scaler.apply(hourly[:, -1]))
        raw = torch.sigmoid(model.readout(h[older], x_last)).numpy().astype(np.float32)
    return raw, h, c


def _inputs(rng: np.random.Generator, n: int, hours: int, f: int) -> F32:
    x = rng.normal(0, 2, (n, hours, f)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan  # unknown values
    x[rng.random(n) < 0.1, : hours // 2] = np.nan  # entities that joined mid-window
    x[rng.random(n) < 0.05] = np.nan  # entities that said nothing
    return x


@pytest.mark.slow
def test_sliced_first_run_equals_the_whole_batch(tiny_model: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pred = Predictor.load(tiny_model)
    p = pred.window_h
    rng = np.random.default_rng(7)
    torch.set_num_threads(1)  # as the detector runs it (PredictorConfig.threads)
    for scope, rt in pred.scopes.items():
        f = rt.scaler.mean.shape[-1]
        for last in (p - 1, p, 3 * p - 1, 5 * p + 7):
            for hours in (2 * p, p + 3):  # a full window and a short store
                x = _inputs(rng, 37, hours, f)
                want, wh, wc = _old_first_run(rt, x, last, p)
                for chunk in (1, 5, 16, 1 << 20):
                    monkeypatch.setattr(stateful, "STATE_CHUNK", chunk)
                    states = ChunkStates()
                    got = states.raw(rt, scope, x, last, p, (len(x), 0))
                    where = f"{scope} last {last}, {hours} h, slices of {chunk}"
                    assert np.array_equal(got, want, equal_nan=True), where
                    held = states._held[scope]
                    assert torch.equal(held.h, wh) and torch.equal(held.c, wc), where
                    assert states.steps == sum(
                        hours - max(hours - 1 - (last - restart_of(last, p, q)), 0)
                        for q in (0, 1) if hours - 1 - (last - restart_of(last, p, q)) < hours)


@pytest.mark.parametrize("chunk", [1, 4])
def test_window_moved_in_place_equals_full_recomputation(chunk: int,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(hour_cache, "SHIFT_CHUNK", chunk)
    test_hour_cache.test_extended_windows_equal_full_recomputation()


def test_the_held_window_is_moved_not_copied() -> None:
    cache = hour_cache.HourCache()
    hours = [np.full((3, 1, 2), float(k), np.float32) for k in range(10)]

    class Fleet:
        def scope(self, scope: Scope) -> list[int]:
            return [0, 1, 2]

    def compute(fleet: object, n: int) -> F32:
        return np.concatenate(hours[last - n + 1: last + 1], axis=1)

    last = 5
    first = cache.window(Fleet(), Scope.IB_PORT, last, 4, compute)  # type: ignore[arg-type]
    last = 7
    moved = cache.window(Fleet(), Scope.IB_PORT, last, 4, compute)  # type: ignore[arg-type]
    assert moved is first
    assert moved[0, :, 0].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert cache.hours_computed == 3 * 4 + 3 * 2


@pytest.mark.slow
def test_the_first_run_steps_a_slice_of_entities_at_a_time(tiny_model: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    pred = Predictor.load(tiny_model)
    rt = pred.scopes[Scope.GPU]
    p = pred.window_h
    monkeypatch.setattr(stateful, "STATE_CHUNK", 8)
    batches: list[int] = []
    step = rt.model.step

    def spy(x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor]:
        batches.append(x.shape[0])
        return step(x, state)

    monkeypatch.setattr(rt.model, "step", spy)
    x = _inputs(np.random.default_rng(1), 30, 2 * p, rt.scaler.mean.shape[-1])
    ChunkStates().raw(rt, Scope.GPU, x, 3 * p - 1, p, (30, 0))
    assert batches and max(batches) <= 8 and sum(batches) == 2 * 30
