"""No source file over 500 lines (issue "A house a newcomer can find their way in", point 4).

A module that grows past this is split along the seams it already shows (a simulator phase, a
policy's kept state, a compiled kernel beside the code that calls it), with a docstring saying
what the new module holds and why it is separate; its public names stay importable from where
they were. A generated or vendored file may be exempted: name it in EXEMPT with the reason.
"""
from __future__ import annotations

from pathlib import Path

import dlsched

MAX_LINES = 500
SRC = Path(dlsched.__file__).resolve().parent.parent          # src/
#: path under src/ (e.g. "dlsched/_generated.py") -> why it may be longer
EXEMPT: dict[str, str] = {}


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def test_no_source_file_is_over_500_lines():
    sizes = {p.relative_to(SRC).as_posix(): _lines(p) for p in sorted(SRC.rglob("*.py"))}
    assert len(sizes) > 50, f"found only {len(sizes)} .py files under {SRC}"
    over = [f"src/{path} ({n} lines)" for path, n in sizes.items() if n > MAX_LINES and path not in EXEMPT]
    assert not over, (f"source files over {MAX_LINES} lines: {', '.join(over)}; split each along its seams, "
                      f"or exempt a generated or vendored one in EXEMPT with the reason")


def test_every_exemption_names_a_file_and_a_reason():
    for path, why in EXEMPT.items():
        assert (SRC / path).is_file(), f"EXEMPT names src/{path}, which does not exist"
        assert why.strip(), f"EXEMPT gives no reason for src/{path}"
