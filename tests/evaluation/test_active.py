"""What gates and sweeps save on the active-only faults (models/evaluation/active.py) and the
coverage that counts what they find (models/evaluation/coverage.py)."""

from __future__ import annotations

import pytest

from models.evaluation.active import active_report, tally
from models.evaluation.coverage import downtime_coverage, with_diagnostics
from models.evaluation.jobmodel import JobModel
from models.evaluation.report import active_section
from models.simulator import SimConfig, Simulator
from models.simulator.config_active import ActiveConfig
from models.simulator.diagnostics import Hit, Outcome
from models.simulator.fault_log import CLASSES
from models.simulator.latent import LatentFault
from models.simulator.modes import Mode

T = 1_735_689_600.0
_DENSE = {"M14_p2p_bw": 20.0, "M15_stress": 20.0, "M16_sdc": 5.0}


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    cfg = SimConfig.model_validate({"name": "active", "fleet": {"nodes": 32, "nvlinks_per_gpu": 2},
                                    "time": {"days": 28, "step_s": 300},
                                    "failures": {"rates": _DENSE}})
    return active_report(Simulator(cfg), rates=(None, 30.0, 7.0, 2.0))


def test_costs_are_the_jobs_lost_work_and_the_diagnosis() -> None:
    fault = LatentFault(0, Mode.M15_STRESS, T, 0, 0, 3600.0, 5 * 3600.0)
    hit = Hit(T + 7200.0, 0, 64, 1800.0)
    job, pol = JobModel(restart_s=600.0), ActiveConfig(diagnose_h=4.0)
    lost = 64 * (1800 + 600) / 3600  # 42.67 GPU-h of the job's work
    base = lost + 8 * (4.0 + 5.0)  # and the node's diagnosis and repair
    hit_first = tally([Outcome(fault, hit)], job, pol, 8)
    assert hit_first["baseline_gpu_h"] == pytest.approx(base) and hit_first["saved_gpu_h"] == 0
    assert hit_first["hit"] == 1 and hit_first["found_share"] == 0.0
    found = tally([Outcome(fault, hit, "sweep", T + 3600.0)], job, pol, 8)
    assert found["saved_gpu_h"] == pytest.approx(lost + 8 * 4.0)  # the repair still counts
    assert found["saved_share"] == pytest.approx((lost + 32) / base)
    never_hit = tally([Outcome(fault, None, "gate", T + 60.0)], job, pol, 8)
    assert never_hit["saved_gpu_h"] == 0 and never_hit["found_gate"] == 1
    assert never_hit["baseline_gpu_h"] == 0 and never_hit["saved_share"] is None


def test_no_diagnostics_save_nothing_and_more_sweeps_save_more(report: dict) -> None:
    rows = report["sweep_rates"]
    off = rows["off"]
    assert off["faults"] > 100 and off["saved_gpu_h"] == 0 and off["sweeps"] == 0
    assert off["found_gate"] == off["found_sweep"] == 0
    assert rows["gates only"]["found_sweep"] == 0 and rows["gates only"]["found_gate"] > 0
    saved = [rows[k]["saved_gpu_h"] for k in ("gates only", "every 30 d", "every 7 d",
                                               "every 2 d")]
    assert saved[0] > 0 and saved[1] < saved[2] < saved[3]
    sweeps = [rows[k]["sweeps"] for k in ("every 30 d", "every 7 d", "every 2 d")]
    assert sweeps == sorted(sweeps) and rows["every 2 d"]["found_sweep"] > \
        rows["every 30 d"]["found_sweep"]
    assert all(v["baseline_gpu_h"] == off["baseline_gpu_h"] for v in rows.values())


def test_the_configured_policy_is_reported_per_mode(report: dict) -> None:
    by_mode = report["by_mode"]
    assert set(by_mode) == {"M14_p2p_bw", "M15_stress", "M16_sdc"}
    total = report["total"]
    assert total["faults"] == sum(v["faults"] for v in by_mode.values())
    assert total["faults"] == (total["found_gate"] + total["found_sweep"] + total["hit"]
                               + total["latent"])
    text = "\n".join(active_section(report))
    assert "M15_stress" in text and "every 7 d" in text and "found by sweep" in text


def test_a_class_diagnostics_find_first_counts_as_observed() -> None:
    cov = downtime_coverage({"M8_psu": {"failures": 2, "seen": 2, "share": 1.0}})
    assert cov["classes"]["GPU P2P bandwidth low"]["mode"] == "M14_p2p_bw"
    assert cov["classes"]["GPU P2P bandwidth low"]["observed"] == 0.0  # never passively
    total = sum(c.share for c in CLASSES)
    both = with_diagnostics(cov, {"M14_p2p_bw": 0.5, "M15_stress": 0.4, "M16_sdc": None})
    assert both["observed_share"] == pytest.approx(19.2 / total)
    assert both["observed_share_diagnostics"] == pytest.approx((19.2 + 6.6) / total)
    assert with_diagnostics(cov, {})["observed_share_diagnostics"] == cov["observed_share"]
