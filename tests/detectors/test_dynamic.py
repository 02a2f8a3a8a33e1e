"""Every rule of `DynamicThresholds`, on the in-memory fleet, with its real time logic: rules
on rollups recompute once a minute of `now`, baselines learn once an hour (and never from a
flagged hour), and a rule that needs a learned hour does not judge before one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from models.detectors.dynamic import HOUR, DynamicConfig, DynamicThresholds
from models.detectors.findings import Finding
from tests.detectors.view import T0, FakeFleet, FakeScope, finding

D = DynamicConfig()
MIN = 60.0


def zero(scope: FakeScope, metrics: Sequence[str], res: Sequence[str] = ("1m", "1h")) -> None:
    for m in metrics:
        for r in res:
            scope.fill(m, 0.0, r)


def only(scope: FakeScope, metric: str, values: Sequence[float], res: str) -> None:
    """Entity 0's newest buckets are `values`, every older bucket zero."""
    scope.put(metric, 0, [0.0] * scope._length(res), res)
    scope.put(metric, 0, values, res)


def risk0(findings: list[Finding], rule: str) -> float:
    got = finding(findings, rule)
    assert not got.risk[1:].any(), f"{rule}: only entity 0 has the condition"
    return float(got.risk[0])


# ---- HBM temperature held ----------------------------------------------------------------------

def test_hbm_temp_sustained_fires_after_its_hold_and_restarts_after_cooling() -> None:
    f, det = FakeFleet(), DynamicThresholds()
    f.gpu.set_latest("mem_temp", 60.0)
    f.gpu.set_latest("mem_temp", D.hbm_temp_c + 1, slot=0)

    def at(t: float) -> float:
        return risk0(det.detect(f, t), "hbm_temp_sustained")

    assert at(T0) == 0.0
    assert at(T0 + D.hbm_temp_hold_s - 1) == 0.0  # just short of the hold
    assert at(T0 + D.hbm_temp_hold_s) == pytest.approx(D.hbm_temp_risk)
    f.gpu.set_latest("mem_temp", np.nan, slot=0)  # a gap neither clears nor restarts the clock
    assert at(T0 + D.hbm_temp_hold_s + 5) == pytest.approx(D.hbm_temp_risk)
    f.gpu.set_latest("mem_temp", D.hbm_temp_c, slot=0)  # at the limit is not above it: reset
    assert at(T0 + D.hbm_temp_hold_s + 10) == 0.0
    f.gpu.set_latest("mem_temp", D.hbm_temp_c + 1, slot=0)
    assert at(T0 + D.hbm_temp_hold_s + 15) == 0.0  # the hold starts again
    assert at(T0 + 2 * D.hbm_temp_hold_s + 14) == 0.0
    assert at(T0 + 2 * D.hbm_temp_hold_s + 15) == pytest.approx(D.hbm_temp_risk)


# ---- correctable ECC growth --------------------------------------------------------------------

def sbe_fleet() -> FakeFleet:
    """GPUs whose last days were quiet (the daily buckets hold zeros)."""
    f = FakeFleet()
    zero(f.gpu, ("ecc_sbe_volatile", "remapped_rows_correctable"), ("1m", "1h", "1d"))
    return f


def sbe_hour(f: FakeFleet, count: float, recur: int) -> None:
    """GPU 0: `count` errors in the last hour; bursts in `recur` of the 6 finished hours."""
    only(f.gpu, "ecc_sbe_volatile", [count], "1m")
    only(f.gpu, "ecc_sbe_volatile", [D.sbe_burst_min] * recur, "1h")


def sbe_after(history: Sequence[float], count: float, recur: int) -> tuple[
        float, FakeFleet, DynamicThresholds]:
    """Learn one hour per history count, then judge `count` at the next hour."""
    f, det = sbe_fleet(), DynamicThresholds()
    for i, h in enumerate(history):
        sbe_hour(f, h, 0)
        assert risk0(det.detect(f, T0 + i * HOUR), "sbe_growth") == 0.0
    sbe_hour(f, count, recur)
    t = T0 + len(history) * HOUR
    return risk0(det.detect(f, t), "sbe_growth"), f, det


SBE = {
    "recurs: watch": ([0.0], D.sbe_min_count, D.sbe_watch_hours, D.watch_risk),
    # No growth estimate (too little history): the recurrence decides, as before.
    "recurs more, no estimate: warning": ([0.0], D.sbe_min_count, D.sbe_recur_hours,
                                          D.warn_risk),
    "one error short of the count": ([0.0], D.sbe_min_count - 1, D.sbe_recur_hours, 0.0),
    "one burst hour short": ([0.0], D.sbe_min_count, D.sbe_watch_hours - 1, 0.0),
    "x baseline": ([5.0], D.sbe_factor * 5.0, D.sbe_watch_hours, D.watch_risk),
    "just under x baseline": ([5.0], D.sbe_factor * 5.0 - 1, D.sbe_watch_hours, 0.0),
    "x its own worst hour": ([0.0, 100.0], D.sbe_over_peak * 100.0, D.sbe_watch_hours,
                             D.watch_risk),
    "just under its worst hour": ([0.0, 100.0], D.sbe_over_peak * 100.0 - 1,
                                  D.sbe_watch_hours, 0.0),
    "no learned hour: not judged": ([], 1000.0, D.sbe_recur_hours, 0.0),
}


@pytest.mark.parametrize(("history", "count", "recur", "risk"), SBE.values(), ids=SBE.keys())
def test_sbe_growth(history: list[float], count: float, recur: int, risk: float) -> None:
    assert sbe_after(history, count, recur)[0] == pytest.approx(risk)


@pytest.mark.parametrize(("usual_per_day", "fires"), [(0.0, True),
                                                      (24 * D.sbe_min_count, False),
                                                      (24 * D.sbe_min_count / D.sbe_over_usual,
                                                       True)])
def test_sbe_growth_is_judged_against_the_gpus_usual_days(usual_per_day: float,
                                                          fires: bool) -> None:
    """A steady carrier (as many errors a day as a burst hour's threshold, times 24) whose
    bursts recur stays quiet against its own last days, though the learned baseline never
    learned it (it was flagged from its first burst)."""
    f, det = sbe_fleet(), DynamicThresholds()
    f.gpu.put("ecc_sbe_volatile", 0, [np.nan] * 7, "1d")  # one finished day: not established
    f.gpu.put("ecc_sbe_volatile", 0, [usual_per_day], "1d")
    sbe_hour(f, 0.0, 0)
    det.detect(f, T0)
    sbe_hour(f, D.sbe_over_usual * D.sbe_min_count - 1 if not fires else D.sbe_min_count * 2,
             D.sbe_watch_hours)
    assert (risk0(det.detect(f, T0 + HOUR), "sbe_growth") > 0) is fires


def growing(f: FakeFleet, hours: int) -> None:
    """GPU 0's last `hours` finished hours double every 3 h from one burst (older ones zero)."""
    only(f.gpu, "ecc_sbe_volatile", [D.sbe_burst_min * 2 ** (i / 3) for i in range(hours)], "1h")


@pytest.mark.parametrize(("grows", "risk"), [(False, D.watch_risk), (True, D.warn_risk)])
def test_sbe_stream_without_a_finished_day_passes_watch_only_on_fitted_growth(
        grows: bool, risk: float) -> None:
    """No finished day (a fresh install, a swapped-in GPU): bursts that recur could be a
    steady carrier's, so recurrence alone keeps it at watch (it would be warning with quiet
    days behind it, "recurs more, no estimate"); a stream the fit reads as growing within a
    day is at warning, its time to failure with it."""
    f, det = sbe_fleet(), DynamicThresholds()
    f.gpu.put("ecc_sbe_volatile", 0, [np.nan] * 7, "1d")
    sbe_hour(f, 0.0, 0)
    det.detect(f, T0)
    sbe_hour(f, D.sbe_min_count * 2, D.sbe_recur_hours)
    if grows:
        growing(f, 18)
    got = finding(det.detect(f, T0 + HOUR), "sbe_growth")
    assert float(got.risk[0]) == pytest.approx(risk)
    assert not got.risk[1:].any()
    assert got.ttf_h is not None
    assert bool(np.isfinite(got.ttf_h[0]) and got.ttf_h[0] <= D.growth.warn_within_h) is grows


@pytest.mark.parametrize(("days_with_errors", "grows", "fires"), [
    (D.sbe_established_days - 1, False, True), (D.sbe_established_days, False, False),
    (D.sbe_established_days, True, True)])
def test_sbe_established_stream_fires_only_on_fitted_growth(days_with_errors: int, grows: bool,
                                                            fires: bool) -> None:
    """A stream that ran on `sbe_established_days` of its last days is a carrier until its fit
    reads growth: its heavy-tailed bursts set new records by chance, a new stream's do not."""
    f, det = sbe_fleet(), DynamicThresholds()
    days = [0.0] * (D.usual_days - days_with_errors) + [1.0] * days_with_errors
    only(f.gpu, "ecc_sbe_volatile", days, "1d")
    sbe_hour(f, 0.0, 0)
    det.detect(f, T0)
    sbe_hour(f, D.sbe_min_count * 2, D.sbe_recur_hours)
    if grows:
        growing(f, 18)
    assert (risk0(det.detect(f, T0 + HOUR), "sbe_growth") > 0) is fires


def test_sbe_burst_hours_count_from_the_burst_size() -> None:
    f, det = sbe_fleet(), DynamicThresholds()
    det.detect(f, T0)
    only(f.gpu, "ecc_sbe_volatile", [D.sbe_min_count], "1m")
    only(f.gpu, "ecc_sbe_volatile", [D.sbe_burst_min - 1] * 6, "1h")
    assert risk0(det.detect(f, T0 + HOUR), "sbe_growth") == 0.0


def test_sbe_growth_holds_for_the_minute_clears_after_and_is_not_learned() -> None:
    risk, f, det = sbe_after([0.0], D.sbe_min_count, D.sbe_recur_hours)
    t = T0 + HOUR
    assert risk == pytest.approx(D.warn_risk)
    sbe_hour(f, 0.0, 0)
    assert risk0(det.detect(f, t + 5), "sbe_growth") == pytest.approx(D.warn_risk)  # cached
    assert risk0(det.detect(f, t + MIN), "sbe_growth") == 0.0  # next minute: reset
    # The flagged hour did not teach the baseline: the same hour an hour later fires again.
    sbe_hour(f, D.sbe_min_count, D.sbe_recur_hours)
    assert risk0(det.detect(f, t + HOUR), "sbe_growth") == pytest.approx(D.warn_risk)


def test_sbe_falls_back_to_the_aggregate_counter() -> None:
    f, det = FakeFleet(), DynamicThresholds()
    zero(f.gpu, ("ecc_sbe_aggregate", "ecc_sbe_volatile"), ("1h", "1d"))
    f.gpu.fill("ecc_sbe_aggregate", 0.0, "1m")
    det.detect(f, T0)
    only(f.gpu, "ecc_sbe_aggregate", [D.sbe_min_count], "1m")
    only(f.gpu, "ecc_sbe_volatile", [D.sbe_burst_min] * D.sbe_watch_hours, "1h")
    assert risk0(det.detect(f, T0 + HOUR), "sbe_growth") == pytest.approx(D.watch_risk)


REMAP_HOURS = round(D.remap_window_s / HOUR)


@pytest.mark.parametrize(("per_hour", "risk"), [
    ([D.remap_min], D.watch_risk),
    ([1.0, *[0.0] * (REMAP_HOURS - 2), 1.0], D.watch_risk),  # spread over the window
    ([D.remap_min - 1], 0.0),
    ([1.0, *[0.0] * (REMAP_HOURS - 1), 1.0], 0.0),  # the first is out of the window: reset
])
def test_remap_step(per_hour: list[float], risk: float) -> None:
    f = sbe_fleet()
    only(f.gpu, "remapped_rows_correctable", per_hour, "1h")
    assert risk0(DynamicThresholds().detect(f, T0), "remap_step") == pytest.approx(risk)


# ---- peers -------------------------------------------------------------------------------------

PEER_N = round(D.peer_window_s / MIN)


def peer_fleet(metric: str) -> FakeFleet:
    f = FakeFleet(gpus=4)
    for m, v in ((metric, 50.0), ("power_draw", 500.0)):
        f.gpu.fill(m, v, "1m")
    return f


def warmer(f: FakeFleet, metric: str, by: float, watts: float = 0.0) -> None:
    f.gpu.put(metric, 0, [50.0 + by] * PEER_N, "1m")
    f.gpu.put("power_draw", 0, [500.0 + watts] * PEER_N, "1m")


PEER = {
    "watch": (D.peer_watch_c, 0.0, D.watch_risk),
    "warning": (D.peer_warn_c, 0.0, D.warn_risk),
    "just under watch": (D.peer_watch_c - 0.5, 0.0, 0.0),
    "just under warning": (D.peer_warn_c - 0.5, 0.0, D.watch_risk),
    "warmer because it draws more power": (D.peer_warn_c, 100.0, 0.0),
}


@pytest.mark.parametrize("metric", ["gpu_temp", "mem_temp"])
@pytest.mark.parametrize(("by", "watts", "risk"), PEER.values(), ids=PEER.keys())
def test_peer_temperature(metric: str, by: float, watts: float, risk: float) -> None:
    f, det, rule = peer_fleet(metric), DynamicThresholds(), f"peer_{metric}"
    assert risk0(det.detect(f, T0), rule) == 0.0  # learns the usual offsets (none)
    warmer(f, metric, by, watts)
    assert risk0(det.detect(f, T0 + MIN), rule) == 0.0  # one evaluation is not persistent
    assert risk0(det.detect(f, T0 + 2 * MIN), rule) == pytest.approx(risk)
    warmer(f, metric, 0.0)
    assert risk0(det.detect(f, T0 + 3 * MIN), rule) == 0.0  # reset


@pytest.mark.parametrize("metric", ["gpu_temp", "mem_temp"])
def test_peer_temperature_learns_a_gpus_usual_offset(metric: str) -> None:
    f, det, rule = peer_fleet(metric), DynamicThresholds(), f"peer_{metric}"
    warmer(f, metric, D.peer_warn_c)  # it always ran this much warmer
    for t in (T0, T0 + MIN, T0 + 2 * MIN):
        # The first hour is learned after it is judged (nothing to compare with yet, and the
        # persistence rule needs two evaluations), so it never fires.
        assert risk0(det.detect(f, t), rule) == 0.0


# ---- InfiniBand ----------------------------------------------------------------------------------

FLAPS = ("ib_link_error_recovery", "ib_link_downed", "ib_link_flaps")
BASE_BER = D.ber_limit / 100


def ib_fleet() -> FakeFleet:
    f = FakeFleet()
    f.ib.fill("ib_ber", BASE_BER, "1m")
    zero(f.ib, FLAPS, ("1m",))
    return f


@pytest.mark.parametrize(("ber", "flap", "risk"), [
    (D.ber_limit * 1.01, 0.0, D.warn_risk),
    (D.ber_limit * 0.99, 0.0, 0.0),
    (D.ber_limit * 1.01, 1.0, 0.8),  # with link flaps: a drain, not a page
    (D.ber_limit * 0.99, 1.0, 0.0),
])
def test_ib_ber(ber: float, flap: float, risk: float) -> None:
    f = ib_fleet()
    only(f.ib, "ib_ber", [ber] * 60, "1m")
    only(f.ib, "ib_link_downed", [flap], "1m")
    assert risk0(DynamicThresholds().detect(f, T0), "ib_ber") == pytest.approx(risk)


@pytest.mark.parametrize(("factor", "risk"), [(1.01, D.watch_risk), (0.99, 0.0)])
def test_ib_ber_step_over_the_learned_baseline(factor: float, risk: float) -> None:
    f, det = ib_fleet(), DynamicThresholds()
    assert risk0(det.detect(f, T0), "ib_ber_step") == 0.0  # learns BASE_BER
    only(f.ib, "ib_ber", [BASE_BER * D.ber_step * factor] * 60, "1m")
    assert risk0(det.detect(f, T0 + MIN), "ib_ber_step") == pytest.approx(risk)
    only(f.ib, "ib_ber", [BASE_BER] * 60, "1m")
    assert risk0(det.detect(f, T0 + 2 * MIN), "ib_ber_step") == 0.0


@pytest.mark.parametrize(("factor", "risk"), [(1.01, D.watch_risk), (0.99, 0.0)])
def test_ib_ber_step_over_the_floor_before_learning(factor: float, risk: float) -> None:
    f = ib_fleet()
    f.ib.fill("ib_ber", 0.0, "1m")
    only(f.ib, "ib_ber", [D.ber_floor * D.ber_step * factor] * 60, "1m")
    assert risk0(DynamicThresholds().detect(f, T0), "ib_ber_step") == pytest.approx(risk)


@pytest.mark.parametrize("metric", FLAPS)
@pytest.mark.parametrize(("per_minute", "risk"), [
    ([1.0], D.watch_risk - 0.05),
    ([0.0], 0.0),
    ([1.0, *[0.0] * 60], 0.0),  # more than an hour ago: reset
])
def test_ib_flaps(metric: str, per_minute: list[float], risk: float) -> None:
    f = ib_fleet()
    only(f.ib, metric, per_minute, "1m")
    assert risk0(DynamicThresholds().detect(f, T0), "ib_flaps") == pytest.approx(risk)


# ---- NVLink --------------------------------------------------------------------------------------

ERRORS = ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay")


def nvl_after(learned: float, errs: float, recov: float, hours: int,
              metric: str = "nvlink_crc_flit") -> float:
    """Learn an hour with `learned` errors on link 0, then judge the next hour: `errs` errors
    and `recov` recoveries in it, and errors in `hours` of the 6 finished hours."""
    f, det = FakeFleet(), DynamicThresholds()
    zero(f.nvlink, (*ERRORS, "nvlink_recovery"))
    only(f.nvlink, metric, [learned], "1m")
    assert risk0(det.detect(f, T0), "nvlink_errors") == 0.0
    only(f.nvlink, metric, [errs], "1m")
    only(f.nvlink, "nvlink_recovery", [recov], "1m")
    only(f.nvlink, metric, [1.0] * hours, "1h")
    return risk0(det.detect(f, T0 + HOUR), "nvlink_errors")


NVL = {
    "errors: watch": (0.0, D.nvl_min_errors, 0.0, 0, D.watch_risk),
    "one error short": (0.0, D.nvl_min_errors - 1, 0.0, 0, 0.0),
    # Recurring errors without a growth estimate: the recurrence decides, as before.
    "recurring errors, no estimate: warning": (0.0, D.nvl_min_errors, 0.0, D.nvl_recur_hours,
                                               D.warn_risk),
    "recurring one hour short": (0.0, D.nvl_min_errors, 0.0, D.nvl_recur_hours - 1,
                                 D.watch_risk),
    "recoveries: watch": (0.0, 0.0, D.nvl_recoveries, 0, D.watch_risk),
    "one recovery short": (0.0, 0.0, D.nvl_recoveries - 1, 0, 0.0),
    "a recovery in recurring hours: warning": (0.0, 0.0, 1.0, D.nvl_recur_hours, D.warn_risk),
    "recurring hours alone": (0.0, 0.0, 0.0, D.nvl_recur_hours, 0.0),
    "x baseline": (10.0, D.nvl_factor * 10.0, 0.0, 0, D.watch_risk),
    "just under x baseline": (10.0, D.nvl_factor * 10.0 - 1, 0.0, 0, 0.0),
}


@pytest.mark.parametrize(("learned", "errs", "recov", "hours", "risk"), NVL.values(),
                         ids=NVL.keys())
def test_nvlink_errors(learned: float, errs: float, recov: float, hours: int,
                       risk: float) -> None:
    assert nvl_after(learned, errs, recov, hours) == pytest.approx(risk)


@pytest.mark.parametrize("metric", ERRORS)
def test_nvlink_errors_count_every_counter(metric: str) -> None:
    assert nvl_after(0.0, D.nvl_min_errors, 0.0, 0, metric) == pytest.approx(D.watch_risk)


def test_nvlink_errors_need_a_learned_hour_but_recoveries_do_not() -> None:
    f, det = FakeFleet(), DynamicThresholds()
    zero(f.nvlink, (*ERRORS, "nvlink_recovery"))
    only(f.nvlink, "nvlink_crc_flit", [1000.0], "1m")
    assert risk0(det.detect(f, T0), "nvlink_errors") == 0.0
    only(f.nvlink, "nvlink_recovery", [D.nvl_recoveries], "1m")
    assert risk0(det.detect(f, T0 + MIN), "nvlink_errors") == pytest.approx(D.watch_risk)
