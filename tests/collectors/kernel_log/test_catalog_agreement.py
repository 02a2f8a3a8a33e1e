"""The shipped Xid catalog against models/detectors/xid.py: one classification, two places."""

from __future__ import annotations

from collectors.kernel_log.xid_catalog import (
    XID_CATALOG,
    GpudAction,
    Severity,
    codes_with,
    xid_info,
)
from models.detectors import xid as detector

COMMON = {13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120,
          121, 140, 143, *range(144, 151)}

# Codes we call application/informational that the detector still scores at OTHER_RISK rather
# than ignoring: 8 (NVIDIA: RESTART_APP), 137 and 170 (GPUd: CHECK_USER_APP_AND_GPU), 154
# (NVIDIA: informational about another Xid). Reported to the detector's owner; listed here so
# a change on either side is noticed.
KNOWN_DETECTOR_GAPS = {8, 137, 154, 170}


def test_catalog_covers_the_detector_and_the_common_codes() -> None:
    wanted = detector.CRITICAL | detector.FATAL_RESET | detector.IGNORED | COMMON
    assert wanted <= set(XID_CATALOG)


def test_critical_set_is_the_detectors() -> None:
    assert codes_with(Severity.CRITICAL) == detector.CRITICAL


def test_fatal_reset_class_is_the_detectors_fatal_reset() -> None:
    fatal_reset = {c for c in codes_with(Severity.RESET) if XID_CATALOG[c].fatal}
    assert fatal_reset == detector.FATAL_RESET


def test_ignored_codes_are_application_or_informational() -> None:
    quiet = codes_with(Severity.APPLICATION) | codes_with(Severity.INFORMATIONAL)
    assert quiet >= detector.IGNORED
    assert quiet - detector.IGNORED == KNOWN_DETECTOR_GAPS


def test_every_code_scores_consistently_with_its_severity() -> None:
    for code, info in XID_CATALOG.items():
        risk = detector.xid_risk(code)
        if info.severity is Severity.CRITICAL:
            assert risk == detector.CRITICAL_RISK, code
        elif info.severity is Severity.RESET and info.fatal:
            assert risk == detector.FATAL_RESET_RISK, code
        else:
            assert risk < detector.FATAL_RESET_RISK, code


def test_gpud_classification_facts() -> None:
    # Rows of GPUd's classification table (github.com/leptonai/gpud,
    # components/accelerator/nvidia/xid/xid.go).
    assert {c for c, e in XID_CATALOG.items() if e.gpud_action is GpudAction.HARDWARE_INSPECTION} \
        == {81, 143}
    assert {c for c, e in XID_CATALOG.items()
            if e.gpud_action is GpudAction.IGNORE_NO_ACTION_REQUIRED} == {45, 92}
    assert {c for c, e in XID_CATALOG.items()
            if e.gpud_action is GpudAction.CHECK_USER_APP_AND_GPU} == {13, 31, 43, 137, 170}
    for code in range(144, 151):
        info = xid_info(code)
        assert info is not None
        assert info.gpud_action is GpudAction.REBOOT_SYSTEM and not info.fatal
        assert info.immediate == "WORKFLOW_NVLINK5_ERR"
    for code in (48, 64, 74, 79, 95, 119, 120, 121, 140):
        assert XID_CATALOG[code].escalates, code


def test_nvidia_catalog_facts() -> None:
    assert XID_CATALOG[48].mnemonic == "ROBUST_CHANNEL_GPU_ECC_DBE"
    assert XID_CATALOG[48].immediate == "WORKFLOW_XID_48"
    assert XID_CATALOG[79].immediate == "RESTART_BM"
    assert XID_CATALOG[94].immediate == "RESTART_APP"
    assert XID_CATALOG[63].deferred_to == "remapped_rows"
    assert xid_info(999) is None
