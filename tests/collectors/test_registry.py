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
from service.cli import main

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
    a10 = lines[1]
    assert "remapped_rows_uncorrectable=4" in a10 and "remapped_rows_pending=1" in a10


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
    from service.cli import local_collectors
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
