"""Evidence counted once (issue 28): rules that read one error stream or share one growth fit
are one piece of evidence in fusion, so together they reach no level that the strongest of
them does not reach alone; independent pieces still add up, but only to a warning. Each known
pair is driven through the real rules on the in-memory fleet, fused, and stepped through the
alert machine for as long as a page would need."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from collectors.catalog import Scope
from models.detectors.dynamic import HOUR, DynamicConfig, DynamicThresholds
from models.detectors.evidence import GPU_TEMP, HBM_ECC, IB_BER, MEM_TEMP, NVLINK_ERRORS
from models.detectors.findings import Finding
from models.detectors.fusion import COMBINED_CAP, ScopeRisk, fuse
from models.detectors.hard import HardRules
from service.stages.alert_machine import AlertMachine, AlertPolicy
from tests.detectors.test_dynamic import FLAPS, ib_fleet, only, sbe_fleet, zero
from tests.detectors.test_growth import growing
from tests.detectors.view import T0, FakeFleet, finding

D = DynamicConfig()
P = AlertPolicy()
CRIT = P.enter[2]
NVL_COUNTERS = ("nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery")

# Every rule of the shipped rule sets and the evidence it is a reading of. A new rule must be
# placed here deliberately: one that reads an existing stream joins its key.
KEYS = {
    "dbe": HBM_ECC, "remap_failure": HBM_ECC, "remap_pending": HBM_ECC,
    "retired_pages_limit": HBM_ECC, "retired_pages_soft": HBM_ECC, "sbe_growth": HBM_ECC,
    "remap_step": HBM_ECC,
    "thermal_slowdown": GPU_TEMP, "near_shutdown": GPU_TEMP, "peer_gpu_temp": GPU_TEMP,
    "hbm_temp_sustained": MEM_TEMP, "peer_mem_temp": MEM_TEMP,
    "pcie_replay_rate": "pcie_replay_rate", "xid": "xid",
    "nvlink_errors": NVLINK_ERRORS, "nvlink_down": "nvlink_down",
    "ib_ber": IB_BER, "ib_ber_step": IB_BER, "ib_flaps": IB_BER, "ib_port_down": "ib_port_down",
    "gpu_unreadable": "gpu_unreadable", "pcie_width_low": "pcie_width_low",
    "pcie_aer_fatal": "pcie_aer_fatal", "pcie_aer_correctable_burst": "pcie_replay_rate",
    "nic_pcie_width_low": "nic_pcie_width_low", "ib_rate_low": "ib_rate_low",
    "roce_gid_missing": "roce_gid_missing",
}


def rules(f: FakeFleet, now: float, dyn: DynamicThresholds) -> list[Finding]:
    return HardRules().detect(f, now) + dyn.detect(f, now)


def fused(found: list[Finding], f: FakeFleet, scope: Scope) -> ScopeRisk:
    return fuse(found, {s: len(f.scopes[s]) for s in Scope if s in f.scopes})[scope]


def highest_level(risk: ScopeRisk, f: FakeFleet, scope: Scope, hours: float = 2.0) -> int:
    """The highest level the alert machine reaches holding this risk for `hours` (a minute a
    step): far beyond every for-duration and the long window a page needs."""
    m, ents = AlertMachine(), f.scopes[scope].entities
    for i in range(int(hours * 60) + 1):
        m.step(scope, risk.risk, risk.hard, T0 + 60.0 * i, ents)
    return int(m.level(scope).max())


def test_every_rule_names_its_evidence() -> None:
    f = FakeFleet()
    found = rules(f, T0, DynamicThresholds())
    assert {x.rule: x.evidence for x in found} == KEYS


# ---- sbe_growth / remap_step / remap_pending: one failing memory ---------------------------------

def hbm_in_trouble() -> tuple[list[Finding], FakeFleet]:
    """The issue's page: GPU 0's correctable errors growing with a time to failure of hours
    (a "3-13 h" window), two rows remapped in the last day and a remap pending a reset."""
    f, det = sbe_fleet(), DynamicThresholds()
    det.detect(f, T0)  # learns a quiet hour
    history = growing(15.0, start=1.0, hours=24)
    f.gpu.put("ecc_sbe_volatile", 0, [0.0] * 168, "1h")
    f.gpu.put("ecc_sbe_volatile", 0, history, "1h")
    f.gpu.put("ecc_sbe_volatile", 0, [2000.0], "1m")
    only(f.gpu, "remapped_rows_correctable", [1.0, 1.0], "1h")
    f.gpu.set_latest("remapped_rows_pending", 0.0)
    f.gpu.set_latest("remapped_rows_pending", 1.0, slot=0)
    return rules(f, T0 + HOUR, det), f


def test_sbe_growth_remap_step_and_remap_pending_count_once() -> None:
    found, f = hbm_in_trouble()
    sbe, step, pend = (finding(found, r) for r in ("sbe_growth", "remap_step", "remap_pending"))
    assert sbe.risk[0] == step.risk[0] == pytest.approx(D.warn_risk)
    assert pend.risk[0] == pytest.approx(0.25)
    ttf = sbe.ttf_at(0)
    assert ttf is not None and step.ttf_at(0) == ttf and 1.0 < ttf < 24.0  # one growth fit
    # As independent rules they made 1 - 0.35 * 0.35 * 0.75 = 0.908: a page on a guess.
    got = fused(found, f, Scope.GPU)
    assert got.risk[0] == pytest.approx(D.warn_risk)
    assert highest_level(got, f, Scope.GPU) == 2


def test_a_hard_memory_fault_still_pages_at_once() -> None:
    found, f = hbm_in_trouble()
    f.gpu.set_latest("ecc_dbe_volatile", 0.0)
    f.gpu.set_latest("ecc_dbe_volatile", 1.0, slot=0)
    got = fused(found + HardRules().detect(f, T0 + HOUR), f, Scope.GPU)
    assert got.risk[0] == 1.0 and got.hard[0]
    m = AlertMachine()
    m.step(Scope.GPU, got.risk, got.hard, T0, f.gpu.entities)
    assert m.level(Scope.GPU)[0] == 3  # the first step: no for-duration, no long window


# ---- the NVLink counter families: one link's error stream ----------------------------------------

def nvlink_in_trouble(counters: Sequence[str]) -> tuple[list[Finding], FakeFleet]:
    """Link 0: errors on `counters`, recurring in every one of the last 6 hours."""
    f, det = FakeFleet(), DynamicThresholds()
    zero(f.nvlink, NVL_COUNTERS)
    f.nvlink.set_latest("nvlink_state", 1.0)
    det.detect(f, T0)  # learns a quiet hour
    for m in counters:
        only(f.nvlink, m, [D.nvl_min_errors * 10], "1m")
        only(f.nvlink, m, [D.nvl_min_errors] * 6, "1h")
    return rules(f, T0 + HOUR, det), f


@pytest.mark.parametrize("counters", [
    *[(c,) for c in NVL_COUNTERS], NVL_COUNTERS, ("nvlink_crc_flit", "nvlink_recovery"),
], ids=lambda c: "+".join(c))
def test_the_nvlink_counter_families_count_once(counters: tuple[str, ...]) -> None:
    found, f = nvlink_in_trouble(counters)
    live = [x for x in found if x.scope is Scope.NVLINK and x.risk[0] > 0]
    assert live and {x.evidence for x in live} == {NVLINK_ERRORS}
    got = fused(found, f, Scope.NVLINK)
    assert got.risk[0] == pytest.approx(max(float(x.risk[0]) for x in live))
    assert got.risk[0] < CRIT and highest_level(got, f, Scope.NVLINK) <= 2


# ---- IB bit-error rate / flaps: one port's physical layer ----------------------------------------

def test_ib_ber_its_step_and_flaps_count_once() -> None:
    f, det = ib_fleet(), DynamicThresholds()
    det.detect(f, T0)  # learns the port's usual BER
    only(f.ib, "ib_ber", [D.ber_limit * 20] * 60, "1m")  # over the limit, x2000 its baseline
    for m in FLAPS:
        only(f.ib, m, [1.0], "1m")
    found = rules(f, T0 + 60.0, det)
    ber, step, flaps = (finding(found, r) for r in ("ib_ber", "ib_ber_step", "ib_flaps"))
    assert ber.risk[0] == pytest.approx(0.8)  # with flaps: drain at the next boundary
    assert step.risk[0] == pytest.approx(D.watch_risk) and flaps.risk[0] > 0
    # As independent rules: 1 - 0.2 * 0.65 * 0.7 = 0.909, a page the BER rule itself refuses.
    got = fused(found, f, Scope.IB_PORT)
    assert got.risk[0] == pytest.approx(0.8)
    assert highest_level(got, f, Scope.IB_PORT) == 2


# ---- independent pieces add up, but only to a warning --------------------------------------------

def test_independent_pieces_add_up_below_a_page() -> None:
    f = FakeFleet()
    one = np.array([1, 0, 0, 0], bool)

    def rule(name: str, risk: float) -> Finding:
        return Finding(name, Scope.GPU, np.where(one, np.float32(risk), np.float32(0)),
                       np.zeros(4), 0.0, "s", evidence=KEYS[name])

    # Memory, die temperature and PCIe: three streams, each at warning.
    found = [rule("sbe_growth", 0.65), rule("thermal_slowdown", 0.7),
             rule("pcie_replay_rate", 0.6), rule("hbm_temp_sustained", 0.25)]
    got = fused(found, f, Scope.GPU)
    assert got.risk[0] == pytest.approx(COMBINED_CAP) and COMBINED_CAP < CRIT
    assert highest_level(got, f, Scope.GPU) == 2
    weak = fused([rule("hbm_temp_sustained", 0.25), rule("xid", 0.2)], f, Scope.GPU)
    assert weak.risk[0] == pytest.approx(1 - 0.75 * 0.8)  # below the cap: noisy-OR as before


def test_an_advisory_model_moves_no_risk_and_is_explained_last() -> None:
    """Issue 34: where the model's window is not calibrated for the mode, its opinion is
    advisory: the fused risk is exactly the rules' (a cap below watch still held watch alerts
    open past the 0.2 exit), and the explanation lists it after every signal that counts."""
    def one(name: str, risk: float, *, model: bool = False, advisory: bool = False) -> Finding:
        return Finding(name, Scope.GPU, np.array([risk, 0, 0, 0], np.float32), np.zeros(4),
                       0.0, "s", source="model" if model else "rule", advisory=advisory)

    def fused_of(*found: Finding) -> ScopeRisk:
        return fuse(list(found), {Scope.GPU: 4})[Scope.GPU]

    adv = one("lstm_M5_thermal", 0.8, model=True, advisory=True)
    assert fused_of(adv).risk[0] == 0.0
    for rule_risk in (0.1, 0.35, 0.65, 0.95):
        got = fused_of(adv, one("mem_temp", rule_risk))
        assert got.risk[0] == pytest.approx(rule_risk)
        assert [s.rule for s in got.explain(0)] == ["mem_temp", "lstm_M5_thermal"]
    # A calibrated model's opinion still counts as before: agreement lifts to warning.
    assert fused_of(one("lstm_M5_thermal", 0.8, model=True),
                    one("mem_temp", 0.35)).risk[0] == pytest.approx(0.85)
