"""The line-protocol parser and formatter: syntax, escaping, limits and rejections."""

from __future__ import annotations

import random

import pytest

from collectors.frames import Rejection
from collectors.lineprotocol import FieldValue, Point, UInt, parse, timestamp_ns
from collectors.lineprotocol_format import format_line, format_point, format_value

TS = 1_700_000_000_000_000_000


def reasons(rejected: list[Rejection]) -> list[str]:
    return [str(r) for r in rejected]


def test_parses_every_field_type_tags_and_timestamp() -> None:
    text = (
        'gpu,host=n001,gpu=3 f=45.5,i=-3i,u=7u,b1=t,b2=FALSE,b3=True,s="hi",e=1e-3,d=.5 '
        f"{TS}"
    )
    points, rejected = parse(text)
    assert rejected == []
    [p] = points
    assert p == Point("gpu", {"host": "n001", "gpu": "3"},
                      {"f": 45.5, "i": -3, "u": 7, "b1": True, "b2": False, "b3": True,
                       "s": "hi", "e": 0.001, "d": 0.5}, TS)
    assert type(p.fields["i"]) is int
    assert type(p.fields["u"]) is UInt
    assert type(p.fields["f"]) is float
    assert p.line == 1


def test_comments_blank_lines_crlf_and_runs_of_spaces() -> None:
    text = f"# a comment\n\n   \nm f=1i {TS}\r\n  # indented comment\nm  g=2i   {TS}\n"
    points, rejected = parse(text)
    assert rejected == []
    assert [(p.fields, p.line) for p in points] == [({"f": 1}, 4), ({"g": 2}, 6)]


def test_bad_lines_are_rejected_with_line_numbers_and_good_lines_kept() -> None:
    lines = [
        f"gpu,host=n1,gpu=0 gpu_temp=40 {TS}",      # 1 good
        f"gpu,host=n1,gpu=0 gpu_temp=abc {TS}",     # 2
        "gpu,host=n1,gpu=0",                        # 3
        f",host=n1 f=1 {TS}",                       # 4
        f"gpu,host f=1 {TS}",                       # 5
        f"gpu,host= f=1 {TS}",                      # 6
        f"gpu f= {TS}",                             # 7
        f"gpu f=1 {TS}.5",                          # 8
        "gpu f=1 12:00",                            # 9
        'gpu s="unterminated',                      # 10
        f"gpu f=1,f=2 {TS}",                        # 11
        f"gpu,a=1,a=2 f=1 {TS}",                    # 12
        f"gpu f=99999999999999999999i {TS}",        # 13
        f"gpu f=1 {TS} extra",                      # 14
        f"gpu f=1_000 {TS}",                        # 15
        f"gpu f=١٢ {TS}",                           # 16 Arabic-Indic digits
        f"gpu f=-1u {TS}",                          # 17
        f"gpu f=1.5i {TS}",                         # 18
        f"gpu,host=a=b f=1 {TS}",                   # 19
        f"gpu =1 {TS}",                             # 20
        f"gpu f=1 {TS}1234567890",                  # 21
        f"nvlink,host=n1,gpu=0,link=1 nvlink_replay=3i {TS}",  # 22 good
    ]
    points, rejected = parse("\n".join(lines))
    assert [p.line for p in points] == [1, 22]
    got = {r.line or 0: str(r) for r in rejected}
    assert sorted(got) == list(range(2, 22))
    assert got[2] == "line 2: field value 'abc' is not a number (gpu_temp)"
    assert got[3] == "line 3: missing field set"
    assert got[4] == "line 4: missing measurement"
    assert "tag 'host' has no value" in got[5]
    assert "tag 'host' has no value" in got[6]
    assert got[7] == "line 7: field has no value (f)"
    assert got[8] == f"line 8: timestamp '{TS}.5' is not an integer"
    assert got[9] == "line 9: timestamp '12:00' is not an integer"
    assert got[10] == "line 10: unterminated string (s)"
    assert got[11] == "line 11: duplicate field (f)"
    assert "duplicate tag 'a'" in got[12]
    assert "out of the 64-bit integer range" in got[13]
    assert "unexpected text after the timestamp: 'extra'" in got[14]
    assert "'1_000' is not a number" in got[15]
    assert "is not a number" in got[16]
    assert "'-1u' is out of the unsigned 64-bit range" in got[17]
    assert "'1.5i' is not an integer" in got[18]
    assert "unescaped '='" in got[19]
    assert "empty name" in got[20] or "empty tag or field key" in got[20]
    assert "out of the 64-bit nanosecond range" in got[21]


@pytest.mark.parametrize("literal", ["NaN", "nan", "-nan", "inf", "+Inf", "-inf", "Infinity",
                                     "-Infinity"])
def test_nan_and_infinity_literals_are_rejected(literal: str) -> None:
    points, rejected = parse(f"m ok=1 {TS}\nm f={literal} {TS}\nm ok=2 {TS}")
    assert [p.fields["ok"] for p in points] == [1.0, 2.0]
    assert reasons(rejected) == [
        f"line 2: field value {literal!r} is not a number "
        "(line protocol has no NaN or infinity) (f)"
    ]


@pytest.mark.parametrize("literal", ["1e999", "-1e400", "1.7976931348623157e309"])
def test_floats_that_overflow_to_infinity_are_rejected(literal: str) -> None:
    points, rejected = parse(f"m f={literal} {TS}\nm g=1 {TS}")
    assert len(points) == 1
    assert reasons(rejected) == [f"line 1: field value {literal!r} is not finite (f)"]


def test_a_bad_field_on_the_slow_path_is_rejected_too() -> None:
    # The backslash forces the escape-aware scanner; its checks must match the fast path's.
    points, rejected = parse(f'm\\ x f=NaN,s="a" {TS}\nm\\ x f=abc {TS}\nm\\ x f=1 {TS}')
    assert [p.measurement for p in points] == ["m x"]
    assert [r.line for r in rejected] == [1, 2]
    assert "no NaN or infinity" in rejected[0].reason


def test_invalid_utf8_rejects_only_that_line() -> None:
    data = f"m f=1 {TS}\n".encode() + b"m,h=\xff f=2 1\n" + f"m f=3 {TS}\n".encode()
    points, rejected = parse(data)
    assert [p.fields["f"] for p in points] == [1.0, 3.0]
    assert len(rejected) == 1 and rejected[0].line == 2
    assert "not valid UTF-8" in rejected[0].reason


def test_first_line_offsets_numbers() -> None:
    points, rejected = parse(["m f=1 1", "m f=x 1"], first_line=101)
    assert points[0].line == 101
    assert reasons(rejected) == ["line 102: field value 'x' is not a number (f)"]


def test_default_timestamp_and_precision() -> None:
    points, _ = parse("m f=1\nm f=2 3", default_ts_ns=42)
    assert [p.ts_ns for p in points] == [42, 3]
    points, _ = parse("m f=1", default_ts_ns=None)
    assert points[0].ts_ns is None
    points, _ = parse("m f=1 1700000000\nm f=1 -5", precision="s")
    assert [p.ts_ns for p in points] == [1_700_000_000 * 10**9, -5 * 10**9]
    points, _ = parse("m f=1 1700000000123", precision="ms")
    assert points[0].ts_ns == 1_700_000_000_123_000_000
    with pytest.raises(ValueError, match="unknown precision"):
        parse("m f=1 1", precision="fortnight")


def test_lines_past_the_line_limit_are_rejected_and_earlier_ones_kept() -> None:
    text = "\n".join(f"m f={i} {TS}" for i in range(10))
    points, rejected = parse(text, max_lines=4)
    assert [p.fields["f"] for p in points] == [0.0, 1.0, 2.0, 3.0]
    assert reasons(rejected) == [
        "line 5: batch exceeds the limit of 4 lines; lines 5-10 not parsed"
    ]


def test_lines_past_the_byte_limit_are_rejected_and_earlier_ones_kept() -> None:
    line = f"m f=1 {TS}"  # 26 bytes with its newline
    text = "\n".join([line] * 5)
    points, rejected = parse(text, max_bytes=3 * (len(line) + 1))
    assert len(points) == 3
    assert reasons(rejected) == [
        f"line 4: batch exceeds the limit of {3 * (len(line) + 1)} bytes; lines 4-5 not parsed"
    ]
    points, rejected = parse(text.encode(), max_bytes=len(line) + 1, first_line=7)
    assert len(points) == 1
    assert rejected[0].line == 8


def test_a_final_newline_is_not_an_extra_line() -> None:
    for data in ("m f=1 1\nm f=2 2\n", b"m f=1 1\nm f=2 2\n", b"m f=1 1\n\xff\n"):
        points, rejected = parse(data, max_lines=2)
        assert len(points) + len(rejected) == 2
        assert all("limit" not in r.reason for r in rejected)


def test_no_limits() -> None:
    points, rejected = parse(["m f=1 1"] * 50, max_lines=None, max_bytes=None)
    assert len(points) == 50 and not rejected


# ---- escaping and formatting ----------------------------------------------------------------

NASTY = ["plain", "with space", "com,ma", "eq=uals", "back\\slash", "trailing\\", "\\",
         'quo"te', "all ,=\\ mixed", "ünïcödé", "#hash", "  lead"]


@pytest.mark.parametrize("text", NASTY)
def test_escaping_round_trips(text: str) -> None:
    fields: dict[str, FieldValue] = {text: 1.5, "s": text, "n": 3, "u": UInt(2**64 - 1),
                                     "b": False}
    meas = "m" + text  # a measurement may not start with '#' (see below)
    line = format_line(meas, {text: text, "host": "n1"}, fields, TS)
    points, rejected = parse(line)
    assert rejected == [], line
    assert points[0] == Point(meas, {text: text, "host": "n1"}, fields, TS)
    assert type(points[0].fields["u"]) is UInt
    assert format_point(points[0]) == line


def test_a_measurement_cannot_start_like_a_comment() -> None:
    with pytest.raises(ValueError, match="comment"):
        format_line("#m", {}, {"f": 1})


def test_string_field_escapes_quotes_and_backslashes() -> None:
    line = format_line("m", {}, {"s": 'say "hi" \\ ok, a=b'})
    assert line == 'm s="say \\"hi\\" \\\\ ok, a=b"'
    assert parse(line).points[0].fields["s"] == 'say "hi" \\ ok, a=b'


def test_influx_backslash_rules_in_tags() -> None:
    # A backslash before an ordinary character is literal; two backslashes make one.
    points, _ = parse("m,t=a\\b,u=c\\\\d,v=e\\,f f=1 1")
    assert points[0].tags == {"t": "a\\b", "u": "c\\d", "v": "e,f"}


def test_formatter_sorts_tags_and_drops_empty_values() -> None:
    assert format_line("m", {"z": "1", "a": "2", "e": ""}, {"f": 1}, 5) == "m,a=2,z=1 f=1i 5"


@pytest.mark.parametrize(("value", "text"), [
    (True, "true"), (False, "false"), (3, "3i"), (-3, "-3i"), (UInt(3), "3u"), (0.1, "0.1"),
    (1e20, "1e+20"), (2.0, "2.0"), ("x", '"x"'),
])
def test_format_value(value: float | int | bool | str, text: str) -> None:
    assert format_value(value) == text
    assert parse(f"m f={text} 1").points[0].fields["f"] == value


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "multi\nline"])
def test_formatter_refuses_what_line_protocol_cannot_carry(bad: float | str) -> None:
    with pytest.raises(ValueError, match="cannot carry"):
        format_line("m", {}, {"f": bad})
    with pytest.raises(ValueError, match="newline"):
        format_line("m", {"t": "a\nb"}, {"f": 1})
    with pytest.raises(ValueError, match="at least one field"):
        format_line("m", {}, {})


def test_fast_and_escape_aware_paths_agree() -> None:
    # Lines without escapes take the split fast path; appending a quoted string field sends the
    # same line through the scanner. Both must accept, reject and convert identically.
    rng = random.Random(7)
    values = ["1", "-1", "1.5", ".5", "5.", "-0.0", "1e5", "1E-5", "12i", "-12i", "7u", "t",
              "false", "abc", "1.2.3", "NaN", "inf", "1e999", "--1", "1_0", "", "0x10", "+1",
              "9223372036854775807i", "9223372036854775808i", "1ei", "e5", "."]
    for _ in range(400):
        fields = ",".join(f"f{i}={rng.choice(values)}" for i in range(rng.randint(1, 4)))
        line = f"m,host=h{rng.randint(0, 9)} {fields} {TS}"
        fast = parse(line)
        slow = parse(line.replace(" " + fields, ' q="x",' + fields))
        assert [str(r).replace(' q="x",', " ") for r in slow.rejected] == reasons(fast.rejected)
        for p in slow.points:
            del p.fields["q"]
        assert slow.points == fast.points, line


def test_a_source_name_prefixes_reasons_and_stays_on_points() -> None:
    points, rejected = parse("m f=1 1\nm f=x 1", source="part-3.lp")
    assert points[0].source == "part-3.lp"
    assert reasons(rejected) == ["line 2: part-3.lp: field value 'x' is not a number (f)"]


def test_nineteen_digit_stamps_up_to_the_64_bit_limit() -> None:
    # Today's nanosecond stamps have 19 digits; the common-case shortcut must stop at 2**63-1.
    points, rejected = parse("m f=1 9223372036854775807\nm f=1 9223372036854775808\n"
                             "m f=1 1750000000000000000")
    assert [p.ts_ns for p in points] == [2**63 - 1, 1_750_000_000_000_000_000]
    assert reasons(rejected) == ["line 2: timestamp '9223372036854775808' is out of the 64-bit "
                                 "nanosecond range"]


# ---- the catalog's one type per field ----------------------------------------------------------

def test_our_measurements_are_written_in_the_catalog_types_whatever_the_parser_gave() -> None:
    # nvidia-smi's text gives floats, dcgm-exporter's integers: one type reaches InfluxDB.
    fields: dict[str, FieldValue] = {"ecc_sbe_volatile": 3.0, "gpu_temp": 41,
                                     "remapped_rows_pending": True, "pcie_replay": UInt(2)}
    assert format_line("gpu", {"host": "n1", "gpu": "0"}, fields, TS) == (
        f"gpu,gpu=0,host=n1 ecc_sbe_volatile=3i,gpu_temp=41.0,remapped_rows_pending=1i,"
        f"pcie_replay=2i {TS}")
    assert format_line("xid", {"host": "n1", "gpu": "0"}, {"code": 79.0}, TS).endswith(
        f" code=79i {TS}")
    assert format_line("ib_port", {"host": "n1", "device": "mlx5_0", "port": "1"},
                       {"ib_rate": 400, "ib_state": 4.0}, TS).endswith(
        f" ib_rate=400.0,ib_state=4i {TS}")
    # Other measurements, and fields our measurements do not define, keep their own types.
    cpu = format_line("cpu", {}, {"usage_idle": 3.0, "n": 2}, TS)
    assert cpu == f"cpu usage_idle=3.0,n=2i {TS}"
    assert format_line("gpu", {}, {"extra": 3.0}, TS) == f"gpu extra=3.0 {TS}"


@pytest.mark.parametrize("fields,why", [
    ({"ecc_sbe_volatile": 2.5}, "whole numbers"),
    ({"remapped_rows_pending": "No"}, "not 'No'"),
    ({"pcie_replay": UInt(2**63)}, "64-bit integer range"),
    ({"ecc_sbe_volatile": float("inf")}, "whole numbers"),
])
def test_a_value_the_catalog_type_cannot_hold_is_refused(fields: dict[str, FieldValue],
                                                         why: str) -> None:
    with pytest.raises(ValueError, match=why):
        format_line("gpu", {"host": "n1", "gpu": "0"}, fields, TS)


# ---- hostile numbers (issue 14): bounded length, linear time, a reason per line ----------

@pytest.mark.parametrize("token", [
    "1" * 20_000 + "x1",  # a stray character in a long run of digits (backtracked before)
    "1" * 5_000 + "i",  # over Python's 4,300-digit int() limit
    "1" * 5_000 + "u",
    "1" * 5_000,  # a float of 5,000 digits
    "0." + "0" * 70 + "1",  # a valid-looking float, just too long
])
def test_a_number_too_long_is_refused_and_the_valid_lines_kept(token: str) -> None:
    body = f"gpu,host=n1,gpu=0 a=1 1\ngpu,host=n1,gpu=0 a={token} 2\ngpu,host=n1,gpu=0 a=3 3\n"
    for text in (body, body.replace("host=n1", 'host=n\\ 1')):  # fast path and escape path
        got = parse(text)
        assert [p.fields["a"] for p in got.points] == [1.0, 3.0]
        [bad] = got.rejected
        assert bad.line == 2 and bad.metric == "a"
        assert bad.reason.startswith("number too long: field value ")
        assert f"has {len(token)} characters (at most 64)" in bad.reason
        assert len(bad.reason) < 200  # the reason quotes the token cut short


def test_a_timestamp_too_long_is_refused_not_raised() -> None:
    got = parse("gpu,host=n1,gpu=0 a=1 " + "1" * 5_000 + "\ngpu,host=n1,gpu=0 a=2 7\n")
    assert [(p.fields["a"], p.ts_ns) for p in got.points] == [(2.0, 7)]
    [bad] = got.rejected
    assert bad.line == 1 and bad.reason.startswith("number too long: timestamp ")
    assert timestamp_ns("1" * 5_000, 1) is None
    assert timestamp_ns("-" + "9" * 4_400, 1_000_000_000) is None


def test_numbers_up_to_the_bound_still_parse() -> None:
    longest = "1." + "0" * 62  # 64 characters
    got = parse(f"m a={longest},b=-{'0' * 61}1i,c={'0' * 62}1u 0{'0' * 63}")
    assert not got.rejected
    assert got.points[0].fields == {"a": 1.0, "b": -1, "c": 1}
    assert got.points[0].ts_ns == 0


def test_a_long_stray_tail_is_quoted_short() -> None:
    got = parse("m a=1 1 " + "x" * 10_000)
    [bad] = got.rejected
    assert "unexpected text after the timestamp" in bad.reason and "10000 characters" in bad.reason
    assert len(bad.reason) < 200
