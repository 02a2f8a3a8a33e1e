"""Evidence keys: which rules are readings of one piece of evidence. Rules that read the same
error stream, or share one growth fit and so one time-to-failure estimate, are not independent
witnesses: fusion (models/detectors/fusion.py) takes the strongest of them, never their
noisy-OR, so one stream cannot count twice toward a level. A rule not named here is its own
evidence (its rule name)."""

from __future__ import annotations

# The GPU's device memory: correctable-ECC growth (sbe_growth) and the row remaps it drives
# (remap_step reuses sbe_growth's time to failure), the pending remap or retirement those
# leave, retired pages (the pre-A100 form of a remap), and the terminal memory faults.
HBM_ECC = "hbm_ecc"
# The GPU die's temperature sensor and the throttle it drives: the slowdown, the shutdown
# margin and the peer comparison all read it.
GPU_TEMP = "gpu_temp"
# The HBM's temperature sensor: the sustained-heat rule and the peer comparison.
MEM_TEMP = "mem_temp"
# One NVLink's error counters (CRC flit, CRC data, replay, recovery): one link's error stream,
# summed by the rules and fitted as one growth.
NVLINK_ERRORS = "nvlink_counters"
# One IB port's physical layer: the bit-error rate (from symbol errors), its step over the
# port's baseline (sharing the BER's growth fit), and the link flaps (error recoveries,
# link-downed events) that the BER rule already reads for its own level.
IB_BER = "ib_phy"
