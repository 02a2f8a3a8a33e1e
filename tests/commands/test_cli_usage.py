"""Bad command lines get one line on stderr, `gpuhealth COMMAND: what is wrong and what is
accepted`, exit code 2 (argparse's usage error), no traceback, nothing on stdout and nothing
written."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from collectors import registry
from service.commands.cli import main

CLI = "import sys; from service.commands.cli import main; sys.exit(main())"

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ", ".join(sorted(registry.SOURCES))


def _files(tmp: Path) -> dict[str, Path]:
    """Inputs that exist but are not what the command takes."""
    made = {
        "text": tmp / "notes.txt",  # prose, not line protocol
        "badyaml": tmp / "bad.yaml",
        "badvalue": tmp / "short.yaml",
        "truncated": tmp / "cut.lp.gz",  # gzip magic, then garbage
        "labels": tmp / "labels.jsonl",
        "trace": tmp / "trace",  # a real trace directory, one round
    }
    made["text"].write_text("these are my notes\nnot a trace\n")
    made["badyaml"].write_text("fleet: [nodes\n")
    made["badvalue"].write_text("preset: demo\ntime:\n  days: -2\n")
    made["truncated"].write_bytes(gzip.compress(b"gpu,host=n1,gpu=0 gpu_temp=50 1\n")[:12])
    made["labels"].write_text('{"kind": "failure", \n')
    made["trace"].mkdir()
    (made["trace"] / "t-000000.lp").write_text(
        "gpu,host=n001,gpu=0 gpu_temp=55 1699999200000000000\n")
    return made


CASES: list[tuple[list[str], list[str]]] = [
    # (argv with {name} placeholders, phrases the one line must hold)
    (["parse", "foo", "{text}"], ["gpuhealth parse: ", "unknown source 'foo'", SOURCES]),
    (["agent", "--source", "foo", "--stdout", "--once"],
     ["gpuhealth agent: ", "unknown source 'foo'", SOURCES]),
    (["agent", "--once", "--url", "service:8080"], ["--url", "http://"]),
    (["agent", "--once", "--url", "http://a:8080/write", "--url", "http://a:8080/write"],
     ["--url", "the same URL twice"]),
    (["agent", "--once"], ["--url is required unless --stdout"]),
    (["agent", "--once", "--stdout", "--interval", "0"], ["--interval 0", "positive"]),
    (["agent", "--once", "--stdout", "--identity-every-s", "-1"],
     ["--identity-every-s -1", "0 or more"]),
    (["agent", "--once", "--stdout", "--spool", "{text}"], ["--spool", "not a directory"]),
    (["agent", "--replay", "{tmp}/none", "--stdout"], ["no trace at", "*.lp"]),
    (["simulate", "foo", "{tmp}/out"], ["no scenario 'foo'", "demo, ci, fleet-year", "YAML"]),
    (["simulate", "{badyaml}", "{tmp}/out"], ["not valid YAML", "line 2"]),
    (["simulate", "{badvalue}", "{tmp}/out"], ["time.days", "greater than 0"]),
    (["simulate", "demo", "{tmp}/out", "--days", "-1"], ["time.days", "greater than 0"]),
    (["simulate", "demo", "{tmp}/out", "--overrides", "{tmp}/none.yaml"],
     ["--overrides", "no such file"]),
    (["simulate", "demo", "{text}"], ["not a directory"]),
    (["replay", "{tmp}/none"], ["no trace at", "*.lp / *.lp.gz"]),
    (["replay", "{text}"], ["holds no usable samples", "line 1", "line-protocol"]),
    (["replay", "{truncated}"], ["holds no usable samples", "unreadable"]),
    (["replay", "{trace}", "--speed", "-1"], ["--speed -1", "0"]),
    (["replay", "{trace}", "--config", "{tmp}/none.yaml"], ["settings file", "No such file"]),
    (["replay", "{trace}", "--config", "{badyaml}"], ["settings file", "not valid YAML"]),
    (["evaluate", "--trace", "{tmp}/none", "--detectors", "ours"], ["no trace at"]),
    (["evaluate", "--trace", "{text}", "--detectors", "ours"], ["holds no usable samples"]),
    (["evaluate", "--trace", "{trace}", "--labels", "{tmp}/none", "--detectors", "ours"],
     ["--labels", "no such file"]),
    (["evaluate", "--trace", "{trace}", "--labels", "{labels}", "--detectors", "ours"],
     ["labels", "line 1"]),
    (["evaluate", "--scenario", "foo", "--detectors", "ours"], ["no scenario 'foo'"]),
    (["evaluate", "--scenario", "ci", "--days", "-1", "--detectors", "ours"], ["time.days"]),
    (["train", "--trace", "{text}", "--out", "{tmp}/model"], ["holds no usable samples"]),
    (["train", "--scenario", "ci", "--days", "-1", "--out", "{tmp}/model"], ["--days -1"]),
    (["train", "--epochs", "0", "--out", "{tmp}/model"], ["--epochs 0", "1 or more"]),
    (["train", "--trace", "{trace}", "--out", "{text}"], ["--out", "not a directory"]),
    (["evaluate", "--trace", "{trace}", "--out", "{text}"], ["--out", "not a directory"]),
    (["export", "--from", "0", "--to", "10", "--out", "{text}"], ["--out", "not a directory"]),
    (["export", "--from", "0", "--to", "10", "--out", "{tmp}/x", "--config", "{tmp}/none"],
     ["settings file", "No such file"]),
    (["demo", "--speed", "-1", "--port", "0"], ["--speed -1"]),
    (["demo", "--port", "0", "--data-dir", "{text}"], ["--data-dir", "not a directory"]),
    (["serve", "--port", "99999"], ["--port 99999", "1 to 65535"]),
    (["serve", "--replay", "{tmp}/none"], ["no trace at"]),
    (["route-test", "level=3", "--config", "{badyaml}"], ["not valid YAML"]),
    (["route-test", "level"], ["'level' is not NAME=VALUE"]),
    (["token", "list", "--config", "{tmp}/none.yaml"], ["settings file", "No such file"]),
    (["replay", "{trace}", "--log-level", "loud"],
     ["unknown level 'loud'", "debug, info, warning, error"]),
    (["nosuch"], ["invalid choice: 'nosuch'", "replay"]),
]


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own refusals (an unknown source, a bad choice)
        assert isinstance(exc.code, int)
        return exc.code


@pytest.mark.parametrize("argv,says", CASES, ids=[" ".join(c[0][:2]) for c in CASES])
def test_a_bad_command_line_is_one_line_and_exit_2(tmp_path: Path, argv: list[str],
                                                   says: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    names = {k: str(v) for k, v in _files(tmp_path).items()} | {"tmp": str(tmp_path)}
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = _run([a.format(**names) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert err.startswith("gpuhealth") and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""
    for phrase in says:
        assert phrase in err, (phrase, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


@pytest.mark.slow
def test_the_installed_entry_point_prints_no_traceback(tmp_path: Path) -> None:
    """The same through a real process, as a user types it."""
    for argv, says in ((["parse", "foo", "x"], "unknown source 'foo'"),
                       (["simulate", "foo", str(tmp_path / "out")], "no scenario 'foo'")):
        done = subprocess.run(
            [sys.executable, "-c", CLI,
             *argv], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr and "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1 and done.stdout == ""
