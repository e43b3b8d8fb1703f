"""The documentation site (issue 20), built strictly and opened in a real browser.

The build itself fails on any warning (a broken link or anchor, a missing API object). Then:
every page of the navigation is in the site with its title; the setup and checks hidden in the
pages' HTML comments (tests/docs_examples.py) do not show; the API reference has the clients'
methods; and in Chromium the home page, a guide and an API page render with the theme's header,
navigation sections and search, which finds a method.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # mkdocs' dependency

from tests._sync.helpers import wait_until
from tests.browser import harness, site
from tests.browser.page import By
from tests.docs_examples import DOCS, page_blocks

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    site.build(out)
    return out


@pytest.fixture(scope="module")
def base(built: Path) -> Iterator[str]:
    with site.serve(built) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with harness.chromium() as driver:
        yield driver


def nav_pages() -> list[str]:
    """Every page file named in mkdocs.yml's nav."""
    config = yaml.load(
        (harness.ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader
    )  # BaseLoader: the file's !!python tags, if any, stay strings

    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    return list(walk(config["nav"]))


def html_of(built: Path, page: str) -> str:
    # mkdocs' directory URLs: x.md -> x/index.html; index.md (any folder's) -> its folder's
    folder = page.removesuffix(".md").removesuffix("index").rstrip("/")
    return (built / folder / "index.html").read_text()


def test_every_page_of_the_docs_folder_is_in_the_navigation() -> None:
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert set(nav_pages()) == pages


def test_every_page_is_built_with_its_title(built: Path) -> None:
    for page in nav_pages():
        text = html_of(built, page)
        source = (DOCS / page).read_text()
        if source.startswith("--8<--"):  # a page that includes a file: the changelog
            source = (harness.ROOT / source.split('"')[1]).read_text()
        heading = next(line for line in source.splitlines() if line.startswith("# "))
        title = re.sub(r"[`*]", "", heading[2:]).strip()
        found = re.search(r"<h1[^>]*>(.*?)</h1>", text, re.S)
        assert found, page
        assert html.unescape(re.sub(r"<[^>]+>", "", found[1])).strip().startswith(title), page


def test_hidden_example_code_does_not_show(built: Path) -> None:
    hidden = 0
    for page in nav_pages():
        text = html.unescape(re.sub(r"<[^>]+>", "", html_of(built, page)))
        for block in page_blocks(DOCS / page):
            if block.hidden:
                hidden += 1
                # shown, every line would be on the page (one may be, from a visible block)
                lines = [line.strip() for line in block.code.splitlines() if line.strip()]
                assert not all(line in text for line in lines), f"{block.where} shows"
    assert hidden > 10  # the pages do hide setup and checks


def test_the_api_reference_documents_the_clients_and_errors(built: Path) -> None:
    clients = html_of(built, "api/clients.md")
    for anchor in (
        "pgqueue.Client",
        "pgqueue.Client.add_job",
        "pgqueue.Client.list_jobs",
        "pgqueue.AsyncClient.add_job_with_tx",
    ):
        assert f'id="{anchor}"' in clients, anchor
    errors = html_of(built, "api/errors.md")
    assert 'id="pgqueue.errors.JobIdConflict"' in errors
    cli = html_of(built, "cli.md")
    assert "--until-empty" in cli
    assert "pgqueue jobs retry" in cli


@pytest.mark.parametrize(
    ("path", "heading"),
    [("", "pgqueue"), ("getting-started/", "Getting started"), ("api/clients/", "Clients")],
)
def test_a_page_renders_in_the_browser(browser: Any, base: str, path: str, heading: str) -> None:
    browser.get(base + path)
    assert browser.find_element(By.CSS_SELECTOR, "h1").text.startswith(heading)
    header = browser.find_element(By.CSS_SELECTOR, ".md-header")
    assert "pgqueue" in header.text
    sections = browser.find_elements(By.CSS_SELECTOR, ".md-nav--primary > .md-nav__list > li")
    labels = [re.sub(r"\s+", " ", s.get_attribute("textContent")).strip() for s in sections]
    for section in ("Tutorial", "How-to guides", "Reference", "Explanation"):
        assert any(label.startswith(section) for label in labels), labels
    # the stylesheet applied: the header is a coloured bar, not unstyled text
    assert header.value_of_css_property("position") in ("sticky", "fixed")


def test_search_finds_a_method(browser: Any, base: str) -> None:
    browser.get(base)
    browser.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-search__input").click()
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    wait_until(lambda: box.is_displayed(), 10, what="the search box")
    box.send_keys("add_jobs_with_tx")

    def results() -> list[str]:
        items = browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item")
        return [i.text for i in items]

    found = wait_until(results, 20, interval=0.2, what="search results")
    assert any("add_jobs_with_tx" in r or "with_tx" in r for r in found), found
