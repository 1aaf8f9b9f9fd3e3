"""benchmarks/RESULTS.md keeps one block per benchmark between <!-- BENCH:name --> markers; a run
replaces its own block and leaves the rest of the file as it is."""
from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def update_results(name: str, lines: list[str]) -> Path:
    start, end = f"<!-- BENCH:{name} -->", f"<!-- /BENCH:{name} -->"
    block = "\n".join([start, *lines, end])
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(text)      # written whole, then renamed: never half a file
    tmp.replace(RESULTS)
    return RESULTS
