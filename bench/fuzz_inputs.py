"""The fuzz benchmark's inputs (bench.fuzz): one generator per class of hostile or broken write
from issue 14, mixed into `/write` requests of 1 to 200 lines, with valid "canary" lines for a
fixed set of GPUs whose values are recorded so the run can read them back.

Every generated value that looks like a failure is out of range or malformed on purpose; the
valid lines carry only healthy values, so a drain requested during a run is a defect (a bad
value was trusted), never a real failure."""

from __future__ import annotations

import gzip
import random
from collections.abc import Callable
from dataclasses import dataclass, field

S = 10**9
CANARY_HOSTS = tuple(f"canary{k}" for k in range(8))
CANARY_GPUS = tuple(range(8))
FUZZ_HOSTS = tuple(f"fz{k:02d}" for k in range(32))  # the valid, non-canary nodes
MAX_LINES = 200


@dataclass(slots=True)
class Request:
    body: bytes
    gzip: bool
    inputs: int  # generated inputs this request carries (a special gzip body counts as one)
    kind: str
    canaries: list[tuple[str, int, float]] = field(default_factory=list)  # (key, ts, value)


Line = Callable[[random.Random, float], str]


def _host(r: random.Random) -> str:
    return r.choice(FUZZ_HOSTS)


def _ns(t: float) -> int:
    return int(t * S)


def valid(r: random.Random, now: float) -> str:
    h, ts = _host(r), _ns(now - r.uniform(0, 2))
    match r.randrange(4):
        case 0:
            return (f"gpu,host={h},gpu={r.randrange(8)} gpu_temp={r.uniform(30, 80):.1f},"
                    f"power_draw={r.uniform(80, 600):.1f},gpu_util={r.randrange(101)}i {ts}")
        case 1:
            return f"gpu,host={h},gpu={r.randrange(8)} ecc_dbe_volatile=0i,ecc_sbe_volatile=0i"
        case 2:
            return f"nvlink,gpu={r.randrange(8)},host={h},link={r.randrange(18)} nvlink_state=1i"
        case _:
            return (f"ib_port,device=mlx5_{r.randrange(8)},host={h},port=1 ib_state=4i,"
                    f"ib_phys_state=5i,ib_symbol_error=0i {ts}")


def junk(r: random.Random, now: float) -> str:
    raw = r.randbytes(r.randint(1, 160)).replace(b"\n", b" ").replace(b"\r", b" ")
    return raw.decode("latin-1")  # re-encoded as UTF-8 below: multibyte junk, control bytes


_NOT_LP = ("hello world", "{\"gpu\": 1}", "gpu", "gpu,host=", "gpu,host=n1", "=,=", " ",
           "gpu,host=fz00,gpu=0 gpu_temp=", "gpu gpu_temp=1 2 3 4", ",,,", "gpu,=x a=1",
           "gpu,host=fz00,gpu=0 =5", "gpu,host=fz00,gpu=0 gpu_temp=\"hot\"", "# comment",
           "gpu,host=fz00,gpu=0 gpu_temp=1 notatime", "\\", "gpu,host=fz00\\", "\"\"\"")


def not_lp(r: random.Random, now: float) -> str:
    return r.choice(_NOT_LP)


def long_number(r: random.Random, now: float) -> str:
    n, h = r.randint(65, 5000), _host(r)
    digits = "".join(r.choice("0123456789") for _ in range(8)) * (n // 8 + 1)
    digits = "1" + digits[: n - 1]
    match r.randrange(5):
        case 0:
            return f"gpu,host={h},gpu=0 gpu_temp={digits}"
        case 1:
            return f"gpu,host={h},gpu=0 ecc_sbe_volatile={digits}i"
        case 2:
            return f"gpu,host={h},gpu=0 gpu_temp=50 {digits}"
        case 3:  # a long run of digits with one stray character: the backtracking case
            cut = r.randrange(1, n)
            return f"gpu,host={h},gpu=0 gpu_temp={digits[:cut]}{r.choice('x.e-+')}{digits[cut:]}"
        case _:
            return f"gpu,host={h},gpu=0 gpu_temp={digits[: n // 2]}.{digits[n // 2:]}e"


_HOSTILE = ("[n1]", "n1\\,n2", "-rf", "--all", "n1\\ -w\\ n2", "a" * 300, "n1..x", "..",
            "$(reboot)", "n1;reboot", "/etc/passwd", "n1\\=x", "ñode", "n1\\\\", "x" * 64,
            "`id`", "n1|n2", "*", "%00", "n1\\ ")


def hostile_name(r: random.Random, now: float) -> str:
    name = r.choice(_HOSTILE)
    if r.random() < 0.5:
        return f"gpu,host={name},gpu={r.randrange(8)} gpu_temp=50"
    return f"ib_port,device={name},host={_host(r)},port=1 ib_state=4i"


def out_of_range(r: random.Random, now: float) -> str:
    h, g = _host(r), r.randrange(8)
    return r.choice((
        f"nvlink,gpu={g},host={h},link=0 nvlink_state={r.choice(('7i', '-1i', '1e308', '2'))}",
        f"ib_port,device=mlx5_0,host={h},port=1 ib_state={r.choice(('7i', '-1i', '1e308'))}",
        f"ib_port,device=mlx5_0,host={h},port=1 ib_phys_state={r.choice(('9i', '-1i'))}",
        f"gpu,host={h},gpu={g} gpu_temp={r.choice(('1e308', '-300', '-1e308', '5000'))}",
        f"gpu,host={h},gpu={g} ecc_dbe_volatile={r.choice(('1e308', '0.5', '-1i', '-1'))}",
        f"gpu,host={h},gpu={g} remapped_rows_pending={r.choice(('7i', '-1i', '1e308'))}",
        f"gpu,host={h},gpu={g} retired_pages_dbe={r.choice(('1e308', '2.5', '-3'))}",
        f"xid,host={h},gpu={g} code={r.choice(('-1i', '1e308', '0.5', '99999999999i'))}",
        f"gpu,host={h},gpu={g} gpu_temp=nan",
        f"gpu,host={h},gpu={g} power_draw=-inf",
    ))


def bad_time(r: random.Random, now: float) -> str:
    ts = r.choice((_ns(now + r.uniform(301, 1e6)), 9223372036854775807, -9223372036854775808,
                   0, 1, -1, _ns(now - r.uniform(86400, 1e9)), _ns(now) * 1000))
    return f"gpu,host={_host(r)},gpu={r.randrange(8)} gpu_temp=50 {ts}"


def skewed(r: random.Random, now: float) -> str:
    """A node whose clock runs fast or slow, within the accepted range: kept, must not age
    other entities (issue 14 #3)."""
    ts = _ns(now + r.uniform(-600, 299))
    return f"gpu,host={_host(r)},gpu={r.randrange(8)} gpu_temp={r.uniform(30, 80):.1f} {ts}"


def unknown(r: random.Random, now: float) -> str:
    return r.choice((f"weather,city=x temp={r.random()}", "gpu,host=fz01,gpu=0 foo=1,bar=\"x\"",
                     "cpu,cpu=cpu-total,host=fz02 usage_idle=99.5", "gpu,host=fz03,gpu=0 xid=1i",
                     "mem,host=fz04 used_percent=12.5,available=1i", "gpu_temp value=50"))


def telegraf(r: random.Random, now: float) -> str:
    h, g, ts = _host(r), r.randrange(8), _ns(now)
    if r.random() < 0.5:
        return (f"nvidia_smi,arch=Hopper,compute_mode=Default,host={h},index={g},"
                f"name=NVIDIA\\ H100\\ 80GB\\ HBM3,pstate=P0,uuid=GPU-0000-{h}-{g} "
                f"clocks_current_sm=1980i,driver_version=\"575.51.03\",power_draw="
                f"{r.uniform(80, 600):.2f},temperature_gpu={r.randint(30, 80)}i,"
                f"utilization_gpu={r.randrange(101)}i {ts}")
    return (f"infiniband,device=mlx5_{r.randrange(8)},host={h},port=1 symbol_error=0i,"
            f"link_downed=0i,port_rcv_data={r.randrange(10**9)}i {ts}")


def new_name(r: random.Random, now: float) -> str:
    """A valid line of a GPU never seen before: names from the wire allocate window memory."""
    return f"gpu,host=ph{r.getrandbits(40):010x},gpu={r.randrange(8)} gpu_temp=40 {_ns(now)}"


# (generator, weight): valid and Telegraf-shaped lines are most of a real write.
LINES: tuple[tuple[Line, int], ...] = (
    (valid, 25), (junk, 8), (not_lp, 8), (long_number, 6), (hostile_name, 8),
    (out_of_range, 12), (bad_time, 8), (skewed, 5), (unknown, 6), (telegraf, 14),
    (new_name, 4))


class Mixer:
    """Builds requests: plain bodies of mixed lines (with duplicates and out-of-order points
    and, where a canary slot is free, canary lines), and gzip bodies: valid, truncated, many
    empty members, or a small compression bomb."""

    def __init__(self, seed: int, step_s: float) -> None:
        self.r = random.Random(seed)
        self.step_s = step_s
        self.last: dict[str, int] = {}  # canary key -> last step-aligned second sent
        self._gens = [g for g, _ in LINES]
        self._weights = [w for _, w in LINES]
        self.counts: dict[str, int] = {}  # inputs generated per class
        self.started = False

    def canaries(self, now: float, limit: int) -> list[tuple[str, str, int, float]]:
        """Canary lines for GPUs whose next step is free: one point per GPU per step, step
        aligned, never ahead of now, so no two canaries of a GPU share a step."""
        slot = int(now // self.step_s * self.step_s)
        keys = [(h, g) for h in CANARY_HOSTS for g in CANARY_GPUS]
        self.r.shuffle(keys)
        out: list[tuple[str, str, int, float]] = []
        for h, g in keys:
            key = f"{h}:gpu{g}"
            if len(out) >= limit or self.last.get(key, -1) >= slot:
                continue
            self.last[key] = slot
            value = round(self.r.uniform(30, 85), 1)
            out.append((f"gpu,host={h},gpu={g} gpu_temp={value} {slot * S}", key, slot, value))
        return out

    def lines(self, n: int, now: float) -> list[str]:
        picked = self.r.choices(self._gens, self._weights, k=n)
        out = [g(self.r, now) for g in picked]
        for g in picked:
            self.counts[g.__name__] = self.counts.get(g.__name__, 0) + 1
        if n > 2 and self.r.random() < 0.3:  # duplicates and out-of-order points
            dup = min(5, n // 2)
            out += self.r.sample(out, k=dup)
            self.counts["duplicate"] = self.counts.get("duplicate", 0) + dup
            self.r.shuffle(out)
        return out[:MAX_LINES]

    def request(self, now: float) -> Request:
        r = self.r
        if not self.started:  # the fleet reports before any attacker writes
            self.started = True
            cans = self.canaries(now, limit=len(CANARY_HOSTS) * len(CANARY_GPUS))
            self.counts["canary"] = len(cans)
            body = ("\n".join(c[0] for c in cans) + "\n").encode()
            return Request(body, False, len(cans), "fleet", [(k, t, v) for _, k, t, v in cans])
        kind = r.choices(("plain", "gzip", "gzip-truncated", "gzip-members", "gzip-bomb",
                          "name-flood"), (85, 5, 3, 3, 3, 1))[0]
        self.counts[f"body:{kind}"] = self.counts.get(f"body:{kind}", 0) + 1
        if kind == "name-flood":  # thousands of new GPUs in one small gzip body
            lines = [new_name(r, now) for _ in range(r.randint(1000, 20_000))]
            return Request(gzip.compress("\n".join(lines).encode(), 6), True, 1, kind)
        if kind == "gzip-members":
            return Request(gzip.compress(b"") * r.randint(10, 5000), True, 1, kind)
        if kind == "gzip-bomb":
            blob = r.choice((b"\n", b"x", b"gpu,host=fz00,gpu=0 gpu_temp=50\n"))
            size = r.randint(2, 12) * 1_000_000
            return Request(gzip.compress(blob * (size // len(blob)), 9), True, 1, kind)
        n = r.randint(1, MAX_LINES)
        cans = self.canaries(now, limit=min(4, n)) if kind != "gzip-truncated" else []
        lines = self.lines(n - len(cans), now) if n > len(cans) else []
        self.counts["canary"] = self.counts.get("canary", 0) + len(cans)
        for c in cans:
            lines.insert(r.randrange(len(lines) + 1), c[0])
        body = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
        canaries = [(k, ts, v) for _, k, ts, v in cans]
        if kind == "plain":
            return Request(body, False, len(lines), kind, canaries)
        packed = gzip.compress(body, 1)
        if kind == "gzip-truncated":
            return Request(packed[: r.randrange(10, max(11, len(packed) - 8))], True, 1, kind)
        return Request(packed, True, len(lines), kind, canaries)
