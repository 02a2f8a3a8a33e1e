"""The power and cooling of a small test fleet as agents and the BMC poller send it (the wire
schema of issue 31), shared by the API's end-to-end chassis test and the console's: n1's PSU0
has failed (Critical, not delivering) and with it the node's supply redundancy; n2's fan3 spins
under its lower critical speed; every other supply delivers, or stands by by design (PSU2)."""

from __future__ import annotations


def chassis_lines(node: str, t: float) -> list[str]:
    """Two supplies delivering and a spare in standby by design; four fans; the node's own
    sensors, stamped at `t` (seconds)."""
    ns = round(t * 1e9)
    out = []
    for i, (health, state) in enumerate(((0, 0), (0, 0), (0, 1))):
        if node == "n1" and i == 0:
            health, state = 2, 3
        out.append(f"psu,host={node},psu=PSU{i} psu_health={health}i,psu_state={state}i,"
                   f"psu_input_v=230.5,psu_output_w={0 if state else 1200.0},psu_temp_c=41 {ns}")
    for i in range(4):
        rpm = 1000.0 if (node == "n2" and i == 3) else 9000.0
        out.append(f"fan,host={node},fan={i} fan_rpm={rpm},fan_health=0i,"
                   f"fan_rpm_lower_critical=1800 {ns}")
    redundant = 0 if node == "n1" else 1
    out.append(f"node,host={node} inlet_temp_c=24.5,exhaust_temp_c=38,psu_redundant="
               f"{redundant}i,fan_redundant=1i,bmc_reachable=1i,edac_ce_total=4i,"
               f"edac_ue_total=0i,mce_total=0i {ns}")
    return out
