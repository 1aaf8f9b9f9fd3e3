"""`--help` of every command reads well at 80 columns (issue "A house a newcomer can find its way
in", point 5): each command's summary is one line of its docstring, and no rendered line is
broken mid-sentence, i.e. ends where the next line's first word would still have fitted (what a
docstring's own hard line breaks did before the CLI's help became Markdown, cli/client.new_app)."""
from __future__ import annotations

import inspect

import pytest
import typer
from typer.testing import CliRunner

from dlsched.cli.main import app

WIDTH = 80


def _commands():
    root = typer.main.get_command(app)
    out = []

    def walk(cmd, path):
        out.append((path, cmd))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            if not sub.hidden:
                walk(sub, path + [name])
    walk(root, [])
    return out


COMMANDS = _commands()


def premature_breaks(text: str, width: int = WIDTH) -> list[str]:
    """Pairs of rendered lines where the first ends early: the next line continues the same
    text (it starts in the same column, the first has text there) and its first word would
    have fitted on the first (one space before the panel's border kept free)."""
    bad = []
    lines = text.splitlines()
    for a, b in zip(lines, lines[1:]):
        right = a.rfind("│") if a.rstrip().endswith("│") and a.count("│") >= 2 else width
        inner = b[1:right] if b.startswith("│") else b[:right]
        off = 1 if b.startswith("│") else 0
        stripped = inner.lstrip(" ")
        if not stripped or stripped.startswith(("[", "-", "*", "╰", "─", "Usage:")):
            continue
        start = off + len(inner) - len(stripped)
        seg = a[start:right].rstrip()
        if not seg.strip() or a[start - 1:start] not in (" ", "│") or seg.rstrip().endswith((".", ":", ";")):
            continue
        if not a[start:start + 1].strip():              # a's text does not start in that column
            continue
        word = stripped.split()[0]
        free = right - (start + len(seg)) - 2
        if len(word) + 1 <= free:
            bad.append(f"{a.rstrip()}\n{b.rstrip()}")
    return bad


@pytest.mark.parametrize("path", [" ".join(p) or "(dlsched)" for p, _ in COMMANDS])
def test_help_is_not_broken_mid_sentence(path):
    args = [] if path == "(dlsched)" else path.split()
    r = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"},
                           prog_name="dlsched")
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= WIDTH
    bad = premature_breaks(r.output)
    assert not bad, f"dlsched {path} --help: a line broken mid-sentence:\n" + "\n---\n".join(bad)


@pytest.mark.parametrize("path", [" ".join(p) for p, c in COMMANDS if p])
def test_every_command_has_a_one_line_summary(path):
    cmd = dict((" ".join(p), c) for p, c in COMMANDS)[path]
    summary = inspect.cleandoc(cmd.help or "").split("\n\n")[0]
    assert summary and "\n" not in summary and len(summary) <= 100, \
        f"dlsched {path}: the summary (the docstring's first paragraph) must be one line of at most 100 characters: {summary!r}"


def test_the_check_finds_a_break_mid_sentence():
    text = ("│ logs        A job's events and per-step statistics (loss, accuracy, step     │\n"
            "│             time), or with --output                                          │\n"
            "│             what its ranks printed.                                          │\n")
    assert len(premature_breaks(text)) == 1
