"""The documentation tells the truth about the code and stays inside the repository.

The README's stage table is the stage table (``populora_core.stages.table``), every
relative link of the README and of docs/ reaches a file (and a heading, when it names
one), and nothing the project ships points at files outside the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from populora_core.stages.table import TABLE, stage_names

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
"""The documentation pages (docs/results/ holds results, not pages)."""

OUTSIDE = ("../shared", "NOTES.md", "shared/ARCHITECTURE")
"""Places outside the repository that a reader who has only the repository cannot open."""


def _strip_code(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (no links there)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _stage_column(path: Path) -> list[str]:
    """The first column of the first markdown table whose header starts with ``| stage |``."""
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| stage |")), None)
    assert start is not None, f"{path.name} has no table whose header starts with '| stage |'"
    rows = []
    for line in lines[start + 2 :]:  # the header, then the |---| separator
        if not line.startswith("|"):
            break
        rows.append(line.strip("|").split("|")[0].strip())
    return rows


@pytest.mark.parametrize("path", [README, ROOT / "docs" / "architecture.md"], ids=lambda p: p.name)
def test_stage_tables_are_the_stage_table(path: Path):
    assert tuple(_stage_column(path)) == stage_names()


def test_architecture_code_block_names_each_stage_and_its_function():
    text = (ROOT / "docs" / "architecture.md").read_text()
    documented = re.findall(r'Stage\(\s*"(\w+)",\s*"(\w+)\.(\w+)",', text)  # one line or (formatted) several
    actual = [(s.name, s.fn.__module__.rsplit(".", 1)[-1], s.fn.__name__) for s in TABLE]
    assert documented == actual


def test_readme_fits_five_minutes():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"
    assert lines[2:6] == [
        "```bash",
        "make run    # set up everything (Debian packages, .venv, the package) and run the main job",
        "make test   # install what the tests need, start a Docker engine, run ruff and pytest",
        "```",
    ]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file: lower case, punctuation dropped, spaces
    to hyphens, ``-1``, ``-2`` … on repeats."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M).splitlines():
        heading = re.match(r"#{1,6} +(.*?) *#* *$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_files_and_headings(page: Path):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _strip_code(page.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_nothing_points_outside_the_repository():
    """Tests may read the public data files beside the checkout; what the project ships may not
    send a reader there."""
    files = [README, *(ROOT / "docs").rglob("*")]
    for package in ("populora_core", "flows", "tasks", "benchmarks"):
        files += (ROOT / package).rglob("*")
    found = []
    for path in files:
        relative = path.relative_to(ROOT)
        if not path.is_file() or "__pycache__" in relative.parts or relative.parts[:2] == ("docs", "results"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # not text
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{relative}:{number}: {word}" for word in OUTSIDE if word in line]
    assert not found, "\n".join(found)


def test_the_hops_from_the_command_to_the_loss_name_existing_functions():
    """docs/architecture.md's numbered trip from `populora train` to the loss and to evolution:
    at most 12 hops, each naming a file that defines the function named beside it."""
    import ast
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## From the command to the loss", 1)[1].split("\n## ", 1)[0]
    hops = re.findall(r"^\d+\. `([\w/]+\.py)` `(\w+)`", section, flags=re.M)
    assert 8 <= len(hops) <= 12, hops
    named = re.findall(r"`([\w/]+\.py)` `(\w+)`", section)
    for path, function in named:
        file = ROOT / path if (ROOT / path).is_file() else ROOT / "populora_core" / path
        assert file.is_file(), path
        defined = {n.name for n in ast.walk(ast.parse(file.read_text())) if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{path} defines no {function}()"
