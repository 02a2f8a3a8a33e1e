"""A real IPMI BMC for tests: OpenIPMI's `ipmi_sim` (Debian package `openipmi`) answering IPMI
v2.0 RMCP+ on a loopback UDP port, with the sensors of a small GPU server, and its console (a
TCP port taking ipmi_sim_cmd(5) commands) to change readings while a test runs.

The SDRs are written in OpenIPMI's SDR source language and compiled with its `sdrcomp` into the
persistent SDR repository ipmi_sim loads for an MC added with `persist_sdr`
(<state dir>/ipmi_sim/<name>/sdr.20.main); the sensors themselves are made by the emulator
command file (sensor_add, sensor_set_threshold, sensor_set_event_support, sensor_set_value /
sensor_set_bit). Sensor names are mixed case: sdrcomp packs an all-capital id string as 6-bit
ASCII, which ipmitool prints as bytes."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from collectors.ipmi import Reading, Target
from collectors.lineprotocol import Point
from tests.loopback import Daemon
from tests.notify.receivers.servers import LOOPBACK, free_port

IPMI_SIM = shutil.which("ipmi_sim")
SDRCOMP = shutil.which("sdrcomp")
IPMITOOL = shutil.which("ipmitool")
MISSING = ("ipmi_sim, sdrcomp and ipmitool are not all installed (apt-get install openipmi "
           "ipmitool; .ci/run does)")

USER = "gpuhealth"
PASSWORD = "sim-pw-7Qx"  # the simulator's, never a real one
NAME = "gpusim"
BMC = 0x20

# Sensor numbers.
PS1, PS2, FAN1, FAN2, INLET, PS_REDUNDANCY = 1, 2, 3, 4, 5, 6
# Power Supply (08h) sensor-specific offsets and the redundancy (0Bh) generic offsets.
PRESENCE, FAILURE, PREDICTIVE, AC_LOST = 0, 1, 2, 3
FULLY_REDUNDANT, REDUNDANCY_LOST = 0, 1
FAN_RAW_RPM = 100  # m: a fan's raw reading times 100 is its RPM
FAN_LC_RAW, FAN_LNC_RAW = 8, 15  # lower critical 800 RPM, lower non-critical 1500 RPM


def _discrete(num: int, entity: str, instance: int, stype: str, code: str, name: str) -> str:
    return f"""
sdr type 2
	sensor_owner_id		0x20
	sensor_owner_lun	0
	channel_number		0
	sensor_number		{num}
	entity_id		{entity}
	entity_instance		{instance}
	sensor_type		{stype}
	event_reading_type_code	{code}
	id_string		"{name}"
endsdr
"""


def _analog(num: int, entity: str, instance: int, stype: str, unit: str, m: int,
            thresholds: str, name: str) -> str:
    return f"""
sdr type 1
	sensor_owner_id		0x20
	sensor_owner_lun	0
	channel_number		0
	sensor_number		{num}
	entity_id		{entity}
	entity_instance		{instance}
	sensor_type		{stype}
	init_scanning		true
	init_events		true
	init_sensor_type	true
	default_event_gen_on	true
	default_sensor_scan_on	true
	event_reading_type_code	1
	sensor_threshold_access	readable
{thresholds}
	analog_data_format	unsigned
	rate_unit		none
	modifier_unit		none
	percentage		false
	base_unit		{unit}
	modifier_unit_code	unspecified
	linearization		linear
	m			{m}
	tolerance		0
	b			0
	accuracy		1
	accuracy_exp		0
	sensor_direction	input
	r_exp			0
	b_exp			0
	sensor_maximum		255
	sensor_minimum		0
	id_string		"{name}"
endsdr
"""


_FAN_THRESHOLDS = f"""	lc_thrsh_readable	true
	lnc_thrsh_readable	true
	return_lc		true
	return_lnc		true
	lc_thresh		{FAN_LC_RAW}
	lnc_thresh		{FAN_LNC_RAW}"""
_TEMP_THRESHOLDS = """	unc_thrsh_readable	true
	uc_thrsh_readable	true
	return_unc		true
	return_uc		true
	unc_thresh		40
	uc_thresh		45"""

SDRS = f"""
sdr type 18
	device_slave_address	0x20
	device_channel_number	0
	chassis			true
	ipmb_event_gen		false
	ipmb_event_recv		false
	fru_inventory		false
	sel			true
	sdr			true
	sensor			true
	entity_id		system_board
	entity_instance		1
	id_string		"gpuhealth sim"
endsdr
{_discrete(PS1, "power_supply", 1, "Power_Supply", "0x6f", "PS1 Status")}
{_discrete(PS2, "power_supply", 2, "Power_Supply", "0x6f", "PS2 Status")}
{_analog(FAN1, "fan_cooling_device", 1, "Fan", "RPM", FAN_RAW_RPM, _FAN_THRESHOLDS, "Fan1")}
{_analog(FAN2, "fan_cooling_device", 2, "Fan", "RPM", FAN_RAW_RPM, _FAN_THRESHOLDS, "Fan2")}
{_analog(INLET, "55", 1, "Temperature", "degrees_C", 1, _TEMP_THRESHOLDS, "Inlet Temp")}
{_discrete(PS_REDUNDANCY, "power_unit", 1, "Power_Supply", "0x0b", "PS Redundancy")}
"""

# All 15 event bits supported and enabled: every assertion and deassertion is logged.
_ALL = "111111111111111"
EMU = f"""
mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
sensor_add 0x20 0 {PS1} 0x08 0x6f
sensor_add 0x20 0 {PS2} 0x08 0x6f
sensor_add 0x20 0 {FAN1} 0x04 0x01
sensor_add 0x20 0 {FAN2} 0x04 0x01
sensor_add 0x20 0 {INLET} 0x01 0x01
sensor_add 0x20 0 {PS_REDUNDANCY} 0x08 0x0b
sensor_set_threshold 0x20 0 {FAN1} settable 000011 0 0 0 0 {FAN_LC_RAW} {FAN_LNC_RAW}
sensor_set_threshold 0x20 0 {FAN2} settable 000011 0 0 0 0 {FAN_LC_RAW} {FAN_LNC_RAW}
sensor_set_threshold 0x20 0 {INLET} settable 011000 0 45 40 0 0 0
""" + "".join(
    f"sensor_set_event_support 0x20 0 {n} enable scanning per-state {_ALL} {_ALL} {_ALL} {_ALL}\n"
    for n in (PS1, PS2, FAN1, FAN2, INLET, PS_REDUNDANCY)) + f"""
sensor_set_bit_clr_rest 0x20 0 {PS1} {PRESENCE} 1 0
sensor_set_bit_clr_rest 0x20 0 {PS2} {PRESENCE} 1 0
sensor_set_bit_clr_rest 0x20 0 {PS_REDUNDANCY} {FULLY_REDUNDANT} 1 0
sensor_set_value 0x20 0 {FAN1} 54 0
sensor_set_value 0x20 0 {FAN2} 52 0
sensor_set_value 0x20 0 {INLET} 24 0
mc_enable 0x20
"""


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


class IpmiSim(Daemon):
    def __init__(self, root: Path) -> None:
        if IPMI_SIM is None or SDRCOMP is None or IPMITOOL is None:
            raise RuntimeError(MISSING)
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_udp_port()
        self.console_port = free_port()
        state = root / "state" / "ipmi_sim" / NAME
        state.mkdir(parents=True)
        (root / "sim.sdrs").write_text(SDRS)
        subprocess.run([SDRCOMP, "-o", str(state / "sdr.20.main"), str(root / "sim.sdrs")],
                       check=True, capture_output=True)
        (root / "sim.emu").write_text(EMU)
        (root / "lan.conf").write_text(f"""name "{NAME}"
set_working_mc 0x20
  startlan 1
    addr {LOOPBACK} {self.port}
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
    guid a123456789abcdefa123456789abcdef
  endlan
  user 2 true "{USER}" "{PASSWORD}" admin 10 md5
console {LOOPBACK} {self.console_port}
""")
        super().__init__(root, "ipmi_sim")

    def start(self, timeout_s: float = 30.0) -> None:
        assert IPMI_SIM is not None
        self.launch([IPMI_SIM, "-n", "-c", str(self.root / "lan.conf"),
                     "-f", str(self.root / "sim.emu"), "-s", str(self.root / "state")],
                    self._console_up, timeout_s)

    def _console_up(self) -> bool:
        # Read its prompt before closing: ipmi_sim writing to a console already closed dies
        # of SIGPIPE.
        try:
            with socket.create_connection((LOOPBACK, self.console_port), timeout=1) as s:
                _until_prompt(s, 5.0)
                return True
        except (OSError, TimeoutError):
            return False

    def command(self, line: str, timeout_s: float = 10.0) -> str:
        """One emulator command through the console; its output once the prompt is back."""
        with socket.create_connection((LOOPBACK, self.console_port), timeout=timeout_s) as s:
            _until_prompt(s, timeout_s)
            s.sendall(line.encode() + b"\n")
            return _until_prompt(s, timeout_s).decode(errors="replace")

    def set_value(self, sensor: int, raw: int) -> None:
        self.command(f"sensor_set_value 0x20 0 {sensor} {raw} 1")

    def set_bit(self, sensor: int, bit: int, value: int) -> None:
        self.command(f"sensor_set_bit 0x20 0 {sensor} {bit} {value} 1")

    def set_only_bit(self, sensor: int, bit: int) -> None:
        self.command(f"sensor_set_bit_clr_rest 0x20 0 {sensor} {bit} 1 1")


def _until_prompt(s: socket.socket, timeout_s: float) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout_s
    while not buf.rstrip(b" ").endswith(b">"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no ipmi_sim console prompt; got {buf[-200:]!r}")
        chunk = s.recv(4096)
        if not chunk:
            raise ConnectionError(f"ipmi_sim console closed; got {buf[-200:]!r}")
        buf += chunk
    return buf


# -- what both live tests (ipmitool and freeipmi) read back ------------------------------------

ENV = "GPUHEALTH_TEST_BMC_PASSWORD"  # the password reaches the collector by this variable


def target(sim: IpmiSim, **kw: object) -> Target:
    """The collector's target for the simulator on loopback; `kw` overrides (tool, ...)."""
    args: dict[str, object] = {"bmc": LOOPBACK, "user": USER, "port": sim.port, "cipher": 3,
                               "password_env": ENV, **kw}
    return Target(**args)  # type: ignore[arg-type]


def by_sensor(got: Reading) -> dict[tuple[str, str], dict[str, object]]:
    """(measurement, unit) -> fields of each reading point, SEL events left out."""
    return {(p.measurement, p.tags.get(p.measurement, "")): dict(p.fields) for p in got.points
            if p.measurement != "sel"}


def sel_events(got: Reading) -> list[Point]:
    return [p for p in got.points if p.measurement == "sel"]
