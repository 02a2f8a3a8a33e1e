"""What every parser does to a tool's output before reading it: bound its size, and word an
exit status and an unreadable output the same way.

A tool's output is bounded at `MAX_OUTPUT_CHARS` (4 MiB of text): a diagnostic that prints
more is broken or hostile, and the parsers must not hold or scan more than that. Past the cap
the head (the tool's banner and versions) and the tail (its summary) are kept and the middle is
dropped, which is what a line-oriented reader needs; the runner should cap what it reads from
the process the same way (`MAX_OUTPUT_BYTES`).
"""

from __future__ import annotations

MAX_OUTPUT_CHARS = 4 * 1024 * 1024
MAX_OUTPUT_BYTES = MAX_OUTPUT_CHARS  # what a runner keeps of stdout (and stderr) per run
_HEAD = 256 * 1024

# Exit statuses of a run ended from outside: `timeout`'s 124, 128+SIGKILL/SIGTERM from a
# shell or Slurm, and Python's negative signal numbers.
_KILLED = {124: "timed out", 137: "killed (SIGKILL)", 143: "terminated (SIGTERM)",
           -9: "killed (SIGKILL)", -15: "terminated (SIGTERM)"}


def bounded(text: str) -> tuple[str, bool]:
    """The text to parse, and whether its middle was dropped for size."""
    if len(text) <= MAX_OUTPUT_CHARS:
        return text, False
    return text[:_HEAD] + "\n" + text[len(text) - (MAX_OUTPUT_CHARS - _HEAD):], True


def killed(exit_code: int | None) -> str:
    """'timed out' or 'killed (SIGKILL)' for an exit status that means the run was stopped
    from outside (its time limit), else ''."""
    return _KILLED.get(exit_code, "") if exit_code is not None else ""


def exit_note(exit_code: int | None) -> str:
    """', exit status N' (or how it was stopped) for a message; '' for 0 or unknown."""
    if not exit_code:
        return ""
    how = killed(exit_code)
    return f", {how}" if how else f", exit status {exit_code}"


def snippet(text: str, limit: int = 120) -> str:
    """The first non-blank line, printable characters only, for an error message."""
    for line in text.splitlines():
        clean = "".join(ch if ch.isprintable() else "?" for ch in line.strip())
        if clean:
            return repr(clean[:limit] + ("..." if len(clean) > limit else ""))
    return "nothing" if not text else "only blank lines"


def unreadable(tool: str, text: str, exit_code: int | None) -> str:
    """The error for an output that is not the tool's at all."""
    if not text.strip():
        return f"{tool} printed nothing{exit_note(exit_code)}"
    return f"not {tool} output{exit_note(exit_code)}: starts with {snippet(text)}"
