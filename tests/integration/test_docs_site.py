"""The docs site (mkdocs.yml, docs/): it builds with --strict (a broken link, a missing anchor or a
page left out of the nav fails) without the network, every decision record is in the index with
its parts, and the README stays a front door. `make test` also builds the site before pytest, so a
broken link fails fast; this test keeps the rule when pytest runs alone."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _mkdocs_or_skip():
    try:
        import mkdocs  # noqa: F401
        import material  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise                      # CI installs the docs extra (make install): never skip there
        pytest.skip("mkdocs-material not installed (pip install -e '.[docs]')")


def test_the_site_builds_strictly_and_offline(tmp_path):
    _mkdocs_or_skip()
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (site / "index.html").exists() and (site / "design-notes.html").exists()
    pages = [p.read_text(errors="replace") for p in site.rglob("*.html")]
    # nothing a reader's browser would fetch from elsewhere: no web fonts, no scripts or styles off-site
    for text in pages:
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text
        assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', text)


def test_the_config_fetches_nothing_at_build_time():
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert cfg["theme"]["name"] == "material" and cfg["theme"]["font"] is False
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in cfg.get("plugins", [])]
    assert set(plugins) <= {"search"}, plugins          # no privacy, social or other fetching plugin
    assert all(v == "warn" for v in cfg["validation"].values())


def test_every_decision_record_is_indexed_and_has_its_parts():
    index = (DOCS / "design-notes.md").read_text()
    records = sorted((DOCS / "decisions").glob("*.md"))
    assert records
    for i, rec in enumerate(records, start=1):
        assert re.fullmatch(rf"{i:04d}-[a-z0-9-]+\.md", rec.name), f"{rec.name}: numbered in order, NNNN-title.md"
        assert f"(decisions/{rec.name})" in index, f"{rec.name} is not in docs/design-notes.md"
        text = rec.read_text()
        assert text.startswith(f"# {i:04d}. "), rec.name
        assert re.search(r"^- Date: \d{4}-\d{2}-\d{2}", text, re.M), f"{rec.name}: no date"
        for part in ("## Context", "## Decision", "## Consequences", "## Measurement"):
            assert part in text, f"{rec.name}: no {part!r}"
    # the index is only an index: every link it has goes to a record or to a subsystem page
    for target in re.findall(r"\]\(([^)#]+)", index):
        assert target.startswith("decisions/") or (DOCS / target).is_file(), target


def test_the_readme_is_a_front_door_whose_links_exist():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    links = re.findall(r"\]\(([^)#\s]+)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if not link.startswith(("http://", "https://")):
            assert (ROOT / link).exists(), f"README links {link}, which is not in the project"
