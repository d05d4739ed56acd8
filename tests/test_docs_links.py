"""The README and docs/ point at things that exist.

Every relative link in README.md and docs/*.md must name an existing file and, with a
``#fragment``, a heading of that file (GitHub's anchor for it); every test the docs
name in a code span (``tests/test_x.py``, ``tests/test_x.py::test_y``, and a bare
``::test_y`` or ``test_y`` after such a file) must exist. Docs that moved or tests that
were renamed otherwise leave dead references behind without anyone noticing.
No database needed.
"""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"^(```|~~~)")
TEST_FILE = re.compile(r"^(tests/[\w/]+\.py)(?:::(\w+))?$")
TEST_NAME = re.compile(r"^(?:::)?(test_\w+)$")


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = "".join(ch for ch in text
                   if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each paragraph outside fenced code blocks: a code
    span may run over a line break, so spans are told apart per paragraph."""
    out: list[tuple[int, str]] = []
    start, lines, last = 0, [], -1
    for n, line in prose_lines(text):
        if not line.strip() or n != last + 1:
            if lines:
                out.append((start, " ".join(lines)))
            start, lines = n, []
        if line.strip():
            if not lines:
                start = n
            lines.append(line.strip())
        last = n
    if lines:
        out.append((start, " ".join(lines)))
    return out


def broken_links(path: Path, text: str) -> list[str]:
    problems = []
    for n, line in paragraphs(text):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, fragment = target.partition("#")
            dest = path if not file_part else (path.parent / file_part).resolve()
            where = f"{path.relative_to(REPO)}:{n}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif fragment:
                if dest.suffix != ".md":
                    problems.append(f"{where}: an anchor into a file that is not Markdown")
                elif fragment not in anchors(dest):
                    problems.append(f"{where}: no heading with anchor #{fragment} in {dest.relative_to(REPO)}")
    return problems


def missing_tests(path: Path, text: str) -> list[str]:
    problems = []
    current: Path | None = None
    for n, line in paragraphs(text):
        for span in CODE_SPAN.findall(line):
            where = f"{path.relative_to(REPO)}:{n}: `{span}`"
            m = TEST_FILE.match(span)
            if m:
                current = REPO / m.group(1)
                if not current.is_file():
                    problems.append(f"{where}: no such file")
                    current = None
                elif m.group(2) and not _defines(current, m.group(2)):
                    problems.append(f"{where}: {m.group(2)} not defined in {m.group(1)}")
                continue
            m = TEST_NAME.match(span)
            if m and current is not None and not _defines(current, m.group(1)):
                problems.append(f"{where}: {m.group(1)} not defined in {current.relative_to(REPO)}")
    return problems


def _defines(path: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def {re.escape(name)}\(", path.read_text(encoding="utf-8"),
                     re.MULTILINE) is not None


def test_every_relative_link_in_the_docs_points_at_an_existing_file_and_heading() -> None:
    problems = [p for path in doc_files() for p in broken_links(path, path.read_text(encoding="utf-8"))]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_test_the_docs_name_exists() -> None:
    problems = [p for path in doc_files() for p in missing_tests(path, path.read_text(encoding="utf-8"))]
    assert not problems, "docs name tests that do not exist:\n" + "\n".join(problems)


def test_the_checks_catch_a_broken_link_a_missing_anchor_and_a_missing_test() -> None:
    # Negative control: the checks above must be able to fail.
    path = REPO / "docs" / "sql.md"
    text = ("[gone](no-such-file.md) [bad anchor](operations.md#no-such-heading)\n"
            "[ok](operations.md#retention) `tests/test_sql_claim.py::test_no_such_test` `::test_nor_this`\n"
            "```\n[in a code block](ignored.md)\n```\n")
    links = broken_links(path, text)
    assert len(links) == 2 and "no such file" in links[0] and "#no-such-heading" in links[1], links
    tests = missing_tests(path, text)
    assert len(tests) == 2 and "test_no_such_test" in tests[0] and "test_nor_this" in tests[1], tests


def test_the_anchor_of_a_heading_is_githubs() -> None:
    assert slug("Errors (SQLSTATEs)") == "errors-sqlstates"
    assert slug("The sweeper and pg_cron") == "the-sweeper-and-pg_cron"
    assert slug("Nobody but an operator pauses the sweeper") == "nobody-but-an-operator-pauses-the-sweeper"
    assert slug("`claim`: what it returns") == "claim-what-it-returns"
