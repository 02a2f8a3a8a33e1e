"""The source registry through the CLI: `gpuhealth parse` over real captures, and
`gpuhealth agent --once --stdout` running the nvidia-smi source against a fake nvidia-smi that
prints a real capture."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from collectors import registry
from collectors.nvidia_smi import DEFAULT_QUERY_FIELDS
from service.commands.cli import main

FIXTURES = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures"
XML = FIXTURES / "nvidia-smi-xml" / "telegraf-a100-sxm4-v12.xml"
NEEDS = pytest.mark.skipif(not FIXTURES.is_dir(),
                           reason="../shared/fixtures is not beside the repo")


def test_duplicate_sources_are_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("nvidia-smi"))
    with pytest.raises(KeyError, match=r"known: .*nvidia-smi"):
        registry.get("nope")


@NEEDS
def test_parse_prints_what_the_source_reads(capsys: pytest.CaptureFixture[str]) -> None:
    text = FIXTURES / "nvidia-smi-text" / "gpud-nvidia-smi-query.535.129.03.out.0.valid.a10"
    assert main(["parse", "nvidia-smi", str(XML), str(text), "--host", "n7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gpu,gpu=0,host=n7,mig=enabled,mig_instances=3\\,4\\,5\\,6 "
                               "gpu_temp=27.0,mem_temp=44.0")
    assert lines[1].startswith('gpu_info,gpu=0,host=n7 uuid="GPU-513536b6-')
    a10 = lines[2]
    assert "remapped_rows_uncorrectable=4" in a10 and "remapped_rows_pending=1" in a10
    assert lines[3].rsplit(" ", 1)[0] == (
        'gpu_info,gpu=0,host=n7 uuid="GPU-73d12ef7-f589-f867-4259-c7090ab44736",'
        'serial="1324521052681",pci_bus_id="00000000:07:00.0",model="NVIDIA A10",'
        'vbios="94.02.5C.00.04",driver="535.129.03"')


@NEEDS
def test_parse_reports_a_bad_file_and_goes_on(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "garbage.xml"
    bad.write_text("<?xml version='1.0'?><nvidia_smi_log><gpu>")
    assert main(["parse", "nvidia-smi", str(bad), str(XML)]) == 1
    out = capsys.readouterr()
    assert "garbage.xml" in out.err and out.out.startswith("gpu,gpu=0")


@NEEDS
def test_agent_once_stdout_runs_the_real_collector(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    csv_row = ", ".join(["0", "41", "50", "88.5", "1410", "97"]
                        + ["Not Active"] * (len(DEFAULT_QUERY_FIELDS) - 6))
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f"""#!/bin/sh
case "$*" in
  *"-x"*) cat '{XML.resolve()}' ;;
  *) echo '{csv_row}' ;;
esac
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env_path = os.environ["PATH"]
    os.environ["PATH"] = f"{fake.parent}{os.pathsep}{env_path}"
    try:
        rc = main(["agent", "--once", "--stdout", "--source", "nvidia-smi", "--host", "n9",
                   "--spool", str(tmp_path / "spool")])
    finally:
        os.environ["PATH"] = env_path
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    gpu = next(line for line in out if line.startswith("gpu,"))
    assert "host=n9" in gpu and "gpu_temp=41" in gpu and "power_draw=88.5" in gpu
    assert "mem_temp=50" in gpu


@NEEDS
def test_parse_reads_ib_sysfs_trees_and_ttar_archives(capsys: pytest.CaptureFixture[str]) -> None:
    ib = FIXTURES / "infiniband-sysfs"
    assert main(["parse", "infiniband", str(ib / "gpud-sys-class-infiniband-h100.0"),
                 str(ib / "procfs-fixtures.ttar")]) == 0
    lines = capsys.readouterr().out.splitlines()
    mlx5_1 = next(x for x in lines if "device=mlx5_1," in x and "ib_rate=400" in x)
    assert "ib_link_downed=255i" in mlx5_1 and "ib_state=4i" in mlx5_1
    assert any("device=hfi1_0" in x for x in lines)  # from the archive


@NEEDS
def test_parse_reads_a_dcgm_exporter_page(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    md = (FIXTURES / "dcgm-exporter" / "k8s-ai-conformance-kops-L4-dcgm-output.md").read_text()
    page = tmp_path / "metrics.txt"
    page.write_text("\n".join(x for x in md.splitlines()
                              if x.startswith(("# HELP DCGM", "# TYPE DCGM", "DCGM_"))) + "\n")
    assert main(["parse", "dcgm-exporter", str(page)]) == 0
    gpu = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("gpu,"))
    assert "gpu_temp=31" in gpu


@NEEDS
def test_parse_reads_xids_from_a_kernel_log(capsys: pytest.CaptureFixture[str]) -> None:
    log = FIXTURES / "xid-logs" / "gpud-dmesg-time-format-iso-xid48-63-94.log"
    assert main(["parse", "kernel-log", str(log), "--host", "n3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    codes = [int(x.split("code=")[1].split("i")[0]) for x in lines]
    assert codes[:2] == [48, 63] and 94 in codes
    assert all(x.startswith("xid,") and "host=n3" in x for x in lines)


def test_the_service_builds_its_own_collectors_from_settings(tmp_path: Path) -> None:
    from service.commands.cli import local_collectors
    from service.settings import Settings

    s = Settings(collectors={"sources": {  # type: ignore[arg-type]
        "infiniband": {"root": str(tmp_path / "none")},
        "kernel-log": {"path": str(tmp_path / "kern.log")}}})
    built = local_collectors(s)
    assert len(built) == 2
    ib = built[0]
    ib.collect()
    assert not ib.status.up and "no InfiniBand devices" in ib.status.reason
    bad = Settings(collectors={  # type: ignore[arg-type]
        "sources": {"nvidia-smi": {"no_such_option": 1}, "nope": {}}})
    with pytest.raises(SystemExit) as exc:
        local_collectors(bad)
    msg = str(exc.value)
    assert "collectors.sources.nvidia-smi" in msg and "collectors.sources.nope" in msg


@NEEDS
def test_kernel_log_xids_land_on_the_gpu_index_nvidia_smi_gives(tmp_path: Path) -> None:
    """The kernel log names a GPU by PCI bus id; the agent asks nvidia-smi for the index."""
    from collectors.frames import Entity

    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '0, 00000000:07:00.0'\necho '1, 00000000:19:00.0'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "kern.log"
    log.write_text("")
    env_path = os.environ["PATH"]
    os.environ["PATH"] = f"{fake.parent}{os.pathsep}{env_path}"
    try:
        assert registry.gpu_bus_map()["00000000:19:00.0"] == 1
        collector = registry.get("kernel-log").build("n4", {"path": str(log)})
    finally:
        os.environ["PATH"] = env_path
    collector.collect()  # it follows from the end, as a live kernel log is followed
    capture = FIXTURES / "xid-logs" / "gpud-dmesg-time-format-iso-xid48-63-94.log"
    with log.open("a") as f:
        f.write(capture.read_text())
    batch = collector.collect()
    assert collector.status.up, collector.status.reason
    assert set(batch.events.keys) == {Entity.gpu("n4", 1).key}
    assert {48, 63, 94} <= {int(v) for v in batch.events.values}


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    rc = main(["parse", *args])
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def _bundle_section(tmp_path: Path, gpu: str, command: str) -> Path:
    from tests.collectors.nvidia_smi.fixtures import TEXT_DIR, bundle_sections

    [bundle] = TEXT_DIR.glob(f"nvidia_gpu_exporter-capture-*__{gpu}__*.txt")
    body = next(b for cmd, b in bundle_sections(bundle) if cmd.startswith(command))
    out = tmp_path / f"{gpu}-{command.split()[1].split('=')[0].lstrip('-')}.txt"
    out.write_text(body)
    return out


@NEEDS
@pytest.mark.parametrize("gpu", ["nvidia-h100-80gb-hbm3", "nvidia-l40s",
                                 "nvidia-geforce-rtx-2080-super"])
def test_parse_reads_the_wide_query_gpu_csv(tmp_path: Path, gpu: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    csv = _bundle_section(tmp_path, gpu, "nvidia-smi --query-gpu=")
    assert len(csv.read_text().splitlines()[0]) > 400
    rc, lines, err = _run(["nvidia-smi", str(csv), "--host", "n2"], capsys)
    assert rc == 0, err
    line, info = lines
    assert line.startswith("gpu,gpu=0,host=n2 ") and "gpu_temp=" in line and "sm_clock=" in line
    assert info.startswith('gpu_info,gpu=0,host=n2 uuid="GPU-') and ",driver=" in info
    assert f"{csv}: 2 points read, 0 refused" in err


def test_parse_of_a_headerless_csv_says_what_it_needs(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "noheader.csv"
    csv.write_text("0, 41, 50, 88.5, 1410, 97\n")
    rc, lines, err = _run(["nvidia-smi", str(csv)], capsys)
    assert (rc, lines) == (1, [])
    assert "no header line" in err and "--format=csv (not noheader)" in err


def test_parse_reports_refused_readings_and_exits_1_on_refusals_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = "9" * 400
    csv = tmp_path / "big.csv"
    csv.write_text(f"index, temperature.gpu, power.draw [W]\n0, {big}, 30.5\n1, 40, {big}\n")
    rc, lines, err = _run(["nvidia-smi", str(csv)], capsys)
    assert rc == 0 and len(lines) == 2 and "inf" not in "".join(lines)
    assert f"{csv}: 2 points read, 2 refused" in err
    assert "temperature.gpu: reading '999999999999...99999999' (400 digits) is out of range " \
           "(node:gpu0, gpu_temp)" in err
    csv.write_text(f"index, temperature.gpu\n0, {big}\n")
    rc, lines, err = _run(["nvidia-smi", str(csv)], capsys)
    assert (rc, lines) == (1, []) and "0 points read, 1 refused" in err


@NEEDS
def test_parse_nvlink_without_nvlink_or_with_all_links_inactive(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    l40s = _bundle_section(tmp_path, "nvidia-l40s", "nvidia-smi nvlink -s")
    rc, lines, err = _run(["nvidia-smi", str(l40s)], capsys)
    assert (rc, lines) == (0, []) and "note: GPU 0 has no NVLink" in err
    rtx = _bundle_section(tmp_path, "nvidia-geforce-rtx-2080-super", "nvidia-smi nvlink -s")
    rc, lines, err = _run(["nvidia-smi", str(rtx)], capsys)
    assert rc == 0 and [x.rsplit(" ", 1)[0] for x in lines] == [
        "nvlink,gpu=0,host=node,link=0 nvlink_state=0i"]
    bad = FIXTURES / "nvidia-smi-text" / "azurehpc-bad_nvlink_status-a100.txt"
    rc, lines, err = _run(["nvidia-smi", str(bad)], capsys)
    assert rc == 0 and len(lines) == 12 and all("nvlink_state=0i" in x for x in lines)


def test_parse_kernel_log_of_unreadable_input_exits_1(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.log"
    junk.write_bytes(b"\x00\x01 binary\nnot a kernel log at all\n")
    rc, lines, err = _run(["kernel-log", str(junk)], capsys)
    assert (rc, lines) == (1, [])
    assert "nothing recognised as kernel-log output" in err and "time stamp" in err
    quiet = tmp_path / "quiet.log"  # a healthy log: read, and nothing to report
    quiet.write_text("[Sun Feb  2 16:24:10 2025] usb 1-1: new high-speed USB device\n")
    rc, lines, err = _run(["kernel-log", str(quiet)], capsys)
    assert (rc, lines) == (0, []) and "note: no Xid line among 1 kernel-log lines" in err


def test_parse_kernel_log_reads_dmesg_T(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "dmesg-T.log"
    log.write_text("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:38:00): 79, pid=1, name=x, "
                   "GPU has fallen off the bus.\n"
                   "[Sun Feb 23 16:24:19 2025] NVRM: Xid (PCI:0000:38:00): " + "9" * 400
                   + ", junk\n")
    rc, lines, err = _run(["kernel-log", str(log), "--host", "n3"], capsys)
    assert rc == 0
    assert lines == ["xid,gpu=1014336,host=n3 code=79i 1740327858000000000"]
    assert f"{log}: 1 point read, 1 refused" in err and "Xid code" in err


def test_parse_dcgm_page_with_a_value_too_large_for_a_float(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "metrics.txt"
    page.write_text('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a"} ' + "9" * 400 + "\n"
                    'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a"} 300.5\n')
    rc, lines, err = _run(["dcgm-exporter", str(page)], capsys)
    assert rc == 0 and len(lines) == 2
    assert lines[0].startswith('gpu_info,gpu=0,host=node uuid="GPU-a" ')
    assert "power_draw=300.5" in lines[1]
    assert "gpu_temp" not in lines[1] and "1 sample(s) skipped: value is not finite" in err
    page.write_text("# HELP up Whether the target is up\nup 1\n")
    rc, lines, err = _run(["dcgm-exporter", str(page)], capsys)
    assert (rc, lines) == (1, []) and "no DCGM_FI_* sample" in err


def test_parse_of_an_unknown_source_names_the_known_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:  # argparse's usage error
        main(["parse", "foo", str(tmp_path / "x")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "unknown source 'foo'" in err and "ibstat" in err and len(err.splitlines()) == 1
