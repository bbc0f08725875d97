"""The pages' links and cited result paths resolve, and the tracked tree stays small."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A path under research/results/ named in a page's text or commands (not a placeholder).
CITED = re.compile(r"research/results/[\w./<>*-]*[\w/>*]")
# A checkout travels whole to GPU hosts beside a 50 MiB part of their packages, under a
# 64 MiB limit; the stagger study's core grid adds about 2 MB of curves as it completes.
MAX_TRACKED_BYTES = 12_000_000


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "research" / "README.md",
            *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "research" / "results").rglob("*.md"))]


def without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in without_code_blocks(page.read_text()).splitlines():
        if m := re.match(r"#+\s+(.*)", line):
            base = slug(m[1])
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(without_code_blocks(page.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_result_paths_exist(page):
    """Every research/results/... path a page names (in text or commands) is kept, except
    the out_dirs its commands would create."""
    text = page.read_text()
    outputs = set(re.findall(r"out(?:_dir)?=(research/results/[\w./-]*[\w/])", text))
    missing = [p for p in set(CITED.findall(text)) - outputs
               if not (ROOT / p).exists() and not re.search(r"[<>*]", p)]
    assert sorted(missing) == []


def test_links_and_anchors_are_checked():
    page = ROOT / "docs" / "multitask.md"
    assert "multitask_history.md#third-subtask-set-seed-0-both-allocations" in page.read_text()
    assert slug("Third subtask set: seed 0, both allocations") \
        == "third-subtask-set-seed-0-both-allocations"
    assert slug("Fourth subtask set, floor 0.02: seed 4, 36.9M env steps") \
        == "fourth-subtask-set-floor-002-seed-4-369m-env-steps"


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout")
def test_tracked_tree_stays_under_12_mb():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.split(b"\0")
    total = sum((ROOT / f.decode()).stat().st_size for f in files
                if f and (ROOT / f.decode()).is_file())
    assert total <= MAX_TRACKED_BYTES, f"tracked files total {total:,} bytes"


def test_a_broken_link_or_anchor_is_found(tmp_path):
    (tmp_path / "a.md").write_text(
        "# A title\n[x](b.md) [y](a.md#a-title) [z](a.md#nope) [w](https://example.org)\n"
        "```\n[q](in_code.md)\n```\n")
    assert broken_links(tmp_path / "a.md") == ["b.md", "a.md#nope"]
