"""A fake `ipmitool` for one soak node's BMC, in band (`-I open`): it reads the node's BMC state
file (written by the harness, soak_fleet.Fleet) and prints what ipmitool prints for the
commands the product's `ipmi` source runs (collectors/ipmi): `sdr elist`, `sensor`, `sel info`
and `sel elist`. A command this fake does not know fails the way ipmitool does (its usage
line and a non-zero status), so a source that asks for something new shows up as a down
source, not as made-up data.

The shapes follow ipmitool's sources (lib/ipmi_sdr.c `ipmi_sdr_print_sensor_fc` for `sdr
elist`, lib/ipmi_sensor.c `ipmi_sensor_print_fc_threshold` for `sensor`, lib/ipmi_sel.c for
`sel info` and `ipmi_sel_print_std_entry` for `sel elist`) and a Supermicro-like board: two
supplies on entity 10 (power supply) with status, temperature, input voltage and output power,
six fans on entity 29 (fan) with the common 300/500/700 RPM lower thresholds, an inlet sensor
on entity 64 and a supply redundancy sensor.

Standard library only: every call of the fake starts a Python interpreter.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SCRIPT = """#!{python} -S
import sys
sys.path.insert(0, {repo!r})
from bench.soak_bmc import main
sys.exit(main({state!r}, sys.argv[1:]))
"""
# Fan thresholds (RPM): lower non-recoverable, critical, non-critical; upper ones unset.
FAN_LNR, FAN_LCR, FAN_LNC = 300.0, 500.0, 700.0
_OPTIONS_WITH_VALUE = frozenset(("-I", "-H", "-p", "-U", "-C", "-f", "-L", "-y", "-k"))
Bmc = Mapping[str, Any]


def write_executable(path: Path, state: Path, repo: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SCRIPT.format(python=sys.executable, repo=str(repo), state=str(state)))
    path.chmod(0o755)


def _row(name: str, number: int, status: str, entity: int, instance: int, reading: str) -> str:
    return f"{name:<16} | {number:02X}h | {status:<3} | {entity:2d}.{instance:1d} | {reading}"


def fan_status(rpm: float) -> str:
    """ipmitool's threshold status of a fan reading against the lower thresholds."""
    if rpm < FAN_LNR:
        return "lnr"
    if rpm < FAN_LCR:
        return "lcr"
    return "lnc" if rpm < FAN_LNC else "ok"


def sdr_elist(bmc: Bmc) -> str:
    rows = [
        _row("CPU1 Temp", 0x01, "ok", 3, 1, f"{bmc['cpu_temp']:.0f} degrees C"),
        _row("System Temp", 0x11, "ok", 7, 1, "31 degrees C"),
        _row("Inlet Temp", 0x14, "ok", 64, 1, f"{bmc['inlet']:.0f} degrees C"),
        _row("Exhaust Temp", 0x15, "ok", 7, 1, f"{bmc['exhaust']:.0f} degrees C"),
    ]
    for i, rpm in enumerate(bmc["fans"], start=1):
        rows.append(_row(f"FAN{i}", 0x40 + i, fan_status(rpm), 29, i, f"{rpm:.0f} RPM"))
    rows.append(_row("12V", 0x30, "ok", 7, 1, "12.19 Volts"))
    for i, p in enumerate(bmc["psus"], start=1):
        base = 0xC8 + 4 * (i - 1)
        states = "Presence detected" + (", Failure detected" if p["failed"] else "")
        rows += [_row(f"PS{i} Status", base, "ok", 10, i, states),
                 _row(f"PS{i} Temp", base + 1, "ok", 10, i, f"{p['temp']:.0f} degrees C"),
                 _row(f"PS{i} Input Voltage", base + 2, "ok", 10, i, f"{p['volts']:.0f} Volts"),
                 _row(f"PS{i} Output Power", base + 3, "ok", 10, i, f"{p['watts']:.0f} Watts")]
    rows.append(_row("PS Redundancy", 0xD8, "ok", 7, 1, "Fully Redundant" if all(
        not p["failed"] for p in bmc["psus"]) else "Redundancy Lost"))
    rows.append(_row("Chassis Intru", 0xAA, "ok", 23, 1, ""))
    return "\n".join(rows) + "\n"


def _num(v: float) -> str:
    return f"{v:<10.3f}"


def sensor(bmc: Bmc) -> str:
    """`ipmitool sensor`: name, reading, unit, status, then lnr lcr lnc unc ucr unr."""
    na = f"{'na':<10}"

    def line(name: str, value: str, unit: str, status: str, lower: Sequence[float] = ()) -> str:
        lows = [_num(v) for v in lower] if lower else [na] * 3
        return (f"{name:<16} | {value:<10} | {unit:<10} | {status:<6} | "
                + " | ".join([*lows, na, na, na]))

    rows = [line("CPU1 Temp", _num(bmc["cpu_temp"]), "degrees C", "ok"),
            line("Inlet Temp", _num(bmc["inlet"]), "degrees C", "ok")]
    for i, rpm in enumerate(bmc["fans"], start=1):
        rows.append(line(f"FAN{i}", _num(rpm), "RPM", fan_status(rpm),
                         (FAN_LNR, FAN_LCR, FAN_LNC)))
    for i, p in enumerate(bmc["psus"], start=1):
        rows.append(line(f"PS{i} Status", "0x0", "discrete",
                         "0x0b00" if p["failed"] else "0x0100"))
    return "\n".join(rows) + "\n"


def sel_info(bmc: Bmc) -> str:
    entries = bmc["sel"]
    last = entries[-1][1] if entries else None
    added = time.strftime("%m/%d/%Y %H:%M:%S", time.gmtime(last)) if last else "Pre-Init"
    return (f"SEL Information\nVersion          : 1.5 (v1.5, v2 compliant)\n"
            f"Entries          : {len(entries)}\nFree Space       : {16 * (512 - len(entries))} "
            f"bytes\nPercent Used     : {len(entries) * 100 // 512}%\n"
            f"Last Add Time    : {added}\nLast Del Time    : Not Available\n"
            f"Overflow         : false\nSupported Cmds   : 'Reserve' 'Get Alloc Info'\n")


def sel_elist(bmc: Bmc) -> str:
    """Records as `ipmi_sel_print_std_entry` prints them: [id, time, sensor, event, direction,
    reading (may be empty)]."""
    if not bmc["sel"]:
        return "SEL has no entries\n"
    out = []
    for rid, at, sensor_name, event, direction, reading in bmc["sel"]:
        stamp = time.strftime("%m/%d/%Y | %H:%M:%S", time.gmtime(at))
        tail = f" | {reading}" if reading else ""
        out.append(f"{rid:4x} | {stamp} | {sensor_name} | {event} | {direction}{tail}")
    return "\n".join(out) + "\n"


_COMMANDS = {("sdr", "elist"): sdr_elist, ("sensor",): sensor, ("sel", "info"): sel_info,
             ("sel", "elist"): sel_elist}


def main(state_file: str, argv: Sequence[str]) -> int:
    args = list(argv)
    command: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in _OPTIONS_WITH_VALUE:
            i += 2
            continue
        if args[i].startswith("-"):
            i += 1
            continue
        command.append(args[i])
        i += 1
    render = _COMMANDS.get(tuple(command))
    if render is None:
        print(f"Invalid command: {' '.join(command)}\nusage: ipmitool [options...] <command>",
              file=sys.stderr)
        return 1
    try:
        bmc = json.loads(Path(state_file).read_text())
    except (OSError, ValueError):
        # What ipmitool says when the in-band driver is not there.
        print("Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: "
              "No such file or directory", file=sys.stderr)
        return 1
    sys.stdout.write(render(bmc))
    return 0
