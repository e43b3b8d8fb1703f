"""What the browser tests ask of a page: elements by ``data-testid``, waits with a deadline."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")

from selenium.common.exceptions import (
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

__all__ = ["By", "WebDriver", "assert_nothing_ran", "hook", "hooks", "post_buttons", "wait"]


def hook(driver: WebDriver | WebElement, name: str) -> WebElement:
    """The element with ``data-testid=name`` (fails if there is none)."""
    return driver.find_element(By.CSS_SELECTOR, f'[data-testid="{name}"]')


def hooks(driver: WebDriver | WebElement, name: str) -> list[WebElement]:
    """Every element with ``data-testid=name``."""
    return driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{name}"]')


def wait(driver: WebDriver, what: str, check: Any, timeout: float = 20) -> Any:
    """Wait up to ``timeout`` seconds until ``check(driver)`` is truthy; fail saying ``what``.

    An element missing, replaced meanwhile (htmx swaps the live parts), or of a page being left
    (a form's POST, then its redirect) counts as not yet: WebDriver's errors are retried until
    the deadline, and the last one is in the failure.
    """
    deadline = time.monotonic() + timeout
    last: WebDriverException | None = None
    while True:
        try:
            value = check(driver)
            if value:
                return value
        except WebDriverException as exc:
            last = exc
        if time.monotonic() > deadline:
            cause = f" (last: {type(last).__name__}: {str(last.msg)[:300]})" if last else ""
            raise AssertionError(f"not within {timeout}s: {what}{cause}")
        time.sleep(0.05)


def click(driver: WebDriver, name: str, timeout: float = 20) -> None:
    """Click the element with ``data-testid=name``, finding it again if a live update replaced it.

    The live pages swap their rows (htmx, on each update the server sends): an element found
    just before such a swap is stale when clicked. Only errors raised before the click happens
    (stale, not found) are retried, so a click is never sent twice.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            hook(driver, name).click()
            return
        except (StaleElementReferenceException, NoSuchElementException) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not within {timeout}s: a click on {name!r} ({type(exc).__name__})"
                ) from exc
            time.sleep(0.05)


def assert_nothing_ran(driver: WebDriver) -> None:
    """No alert is open and no hostile markup set ``window.pgqueueXss``."""
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018 (the property raises when no alert is open)
    assert driver.execute_script("return window.pgqueueXss") is None


def post_buttons(driver: WebDriver) -> list[str]:
    """The text of every button that would POST a form (a read-only page must have none)."""
    return driver.execute_script(  # type: ignore[no-any-return]
        """return [...document.querySelectorAll('button, input[type=submit], input[type=image]')]
            .filter(b => b.type !== 'button' && b.type !== 'reset' && b.form
                && (b.getAttribute('formmethod') || b.form.method).toLowerCase() === 'post')
            .map(b => b.textContent || b.value)"""
    )
