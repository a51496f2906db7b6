"""The README and the book (docs/, built strictly by `make docs` in `make test`): the README stays a
newcomer's page, and every book page is reachable from the navigation."""

from __future__ import annotations

import re

import yaml

from capfleet_e2e.kubebin import repo_root

README_MAX_LINES = 150
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def nav_pages(nav: list[object]) -> set[str]:
    pages: set[str] = set()
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            pages |= nav_pages(value) if isinstance(value, list) else {str(value)}
    return pages


def test_the_readme_is_short_and_tells_no_history() -> None:
    text = (repo_root() / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    assert COMMIT.findall(text) == [], "commit hashes belong in commit messages"
    assert DATE.findall(text) == [], "dated runs belong in the Performance page"
    for command in ("make demo", "make test"):
        assert command in text


def test_every_page_of_the_book_is_in_its_navigation() -> None:
    config = yaml.safe_load((repo_root() / "mkdocs.yml").read_text())
    docs = repo_root() / config["docs_dir"]
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    assert pages == nav_pages(config["nav"])


def test_the_scanners_see_what_they_look_for() -> None:
    assert COMMIT.findall("at ef93c0b, in 36b1811") == ["ef93c0b", "36b1811"]
    assert COMMIT.findall("decade 1234567 deadbeef") == []
    assert DATE.findall("on 2026-11-29") == ["2026-11-29"]
