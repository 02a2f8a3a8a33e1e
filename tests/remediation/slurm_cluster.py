"""A real one-node Slurm cluster for the Slurm hook tests: its own munged (private key and
socket, so a system munged with another key does not matter and /etc is left alone),
slurmctld and slurmd in the foreground (-D), all under one temporary directory on free
ports. The clients reach it through SLURM_CONF (see `SlurmCluster.env`)."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.remediation.hooks.slurm import parse_node

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd")
CLIENTS = ("scontrol", "squeue", "sbatch", "sinfo", "scancel")
SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")  # daemons live here, off a user's PATH
START_TIMEOUT_S = 30.0
CPUS = 4  # declared, not detected (config_overrides): two sleeping jobs fit on any machine


def missing_binaries() -> list[str]:
    return [b for b in (*DAEMONS, *CLIENTS) if which(b) is None]


def which(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    return shutil.which(name, path=path)


def _free_ports(n: int) -> list[int]:
    """n distinct free ports (all held open together while picking, so no repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    root: Path
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout_s: float = 15.0, check: bool = True,
            ) -> subprocess.CompletedProcess[str]:
        """A client command against this cluster."""
        exe = which(argv[0]) or argv[0]
        done = subprocess.run([exe, *argv[1:]], env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} -> exit {done.returncode}: {done.stderr}")
        return done

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        for sub in ("state", "spool", "log", "run", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        (self.root / "run").chmod(0o755)
        key = self.root / "munge" / "munge.key"
        subprocess.run([_need("mungekey"), "--create", f"--keyfile={key}"], check=True,
                       capture_output=True, timeout=15)
        key.chmod(0o600)
        socket_path = self.root / "run" / "munge.socket"
        # --force: pytest's temporary root is mode 0700, which munged's socket-directory
        # check rejects although root (who runs everything here) can reach it.
        self._spawn("munged", [_need("munged"), "--foreground", "--force",
                               f"--socket={socket_path}", f"--key-file={key}",
                               f"--log-file={self.root / 'log' / 'munged.log'}",
                               f"--pid-file={self.root / 'run' / 'munged.pid'}",
                               f"--seed-file={self.root / 'munge' / 'munged.seed'}"])
        self._wait("munged socket", socket_path.exists)
        self.conf.write_text(self._config(socket_path))
        self._spawn("slurmctld", [_need("slurmctld"), "-D", "-i"])
        self._spawn("slurmd", [_need("slurmd"), "-D", "-N", self.node])
        self._wait("node idle", self._idle)

    def stop(self) -> None:
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            # Jobs first, so no slurmstepd or `sleep` outlives the cluster.
            self.run("scancel", "--quiet", f"--user={getpass.getuser()}", check=False)
            self._wait("jobs gone", lambda: not self.run("squeue", "-h", "-t", "R,CG,S",
                                                         check=False).stdout.strip(),
                       timeout_s=15.0, fail=False)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            text = path.read_text(errors="replace").splitlines()[-40:]
            parts.append(f"--- {path.name} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(parts)

    def _config(self, munge_socket: Path) -> str:
        r = self.root
        ctld_port, slurmd_port = _free_ports(2)
        return "\n".join([
            "ClusterName=gpuhealthtest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/builtin",
            "SlurmdParameters=config_overrides",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ReturnToService=2",
            "MinJobAge=600",  # finished jobs stay visible to the assertions
            "KillWait=1",
            "InactiveLimit=0",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=256 "
            "State=UNKNOWN",
            f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ])

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = (self.root / "log" / f"{name}.out").open("wb")
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()

    def _idle(self) -> bool:
        ping = self.run("scontrol", "ping", check=False, timeout_s=5)
        if "UP" not in ping.stdout:
            return False
        state = self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False, timeout_s=5)
        return state.stdout.strip() == "idle"

    def _wait(self, what: str, cond: Callable[[], bool], timeout_s: float = START_TIMEOUT_S,
              fail: bool = True) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            dead = [f"{name} exited with {proc.returncode}"
                    for name, proc in self.procs.items() if proc.poll() is not None]
            try:
                if not dead and cond():
                    return
                error = "; ".join(dead)
            except subprocess.TimeoutExpired as exc:
                error = str(exc)
            if time.monotonic() > deadline or dead:
                if not fail:
                    return
                why = error or f"not within {timeout_s:.0f} s"
                raise RuntimeError(f"Slurm test cluster: no {what} ({why})\n{self.logs()}")
            time.sleep(0.2)


def _need(name: str) -> str:
    path = which(name)
    if path is None:
        raise RuntimeError(f"{name} is not installed")
    return path


# -- helpers for the tests that drive this cluster ---------------------------------------------

WAIT_S = 20.0


def node_field(cluster: SlurmCluster, name: str) -> str:
    line = cluster.run("scontrol", "show", "node", "-o", cluster.node).stdout
    info = parse_node(line)
    return {"State": info.state, "Reason": info.reason}[name]


def job_fields(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    line = cluster.run("scontrol", "show", "job", "-o", job_id).stdout
    return dict(p.split("=", 1) for p in line.split() if "=" in p)


def wait_for(what: str, cond: Any, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def submit(cluster: SlurmCluster, *flags: str) -> str:
    out = cluster.run("sbatch", "--parsable", "-o", "/dev/null", *flags, "--wrap", "sleep 300")
    return out.stdout.strip().split(";")[0]
