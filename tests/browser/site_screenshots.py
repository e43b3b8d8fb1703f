"""Screenshots of the documentation site: ``python -m tests.browser.site_screenshots``.

Not a test (CI does not rewrite the docs): builds the site, serves it, and takes the home page,
a guide and an API reference page in headless Chromium into ``docs/screenshots/`` (``make
docs-screenshots``), plus the home page in dark mode.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.browser import harness, site

OUT = harness.ROOT / "docs" / "screenshots"
PAGES = {
    "site-home.png": ("", False),
    "site-guide.png": ("getting-started/", False),
    "site-api.png": ("api/clients/", False),
    "site-home-dark.png": ("", True),
}


def main() -> None:
    """Build, serve and photograph the site."""
    with tempfile.TemporaryDirectory(prefix="pgqueue-site-") as tmp:
        # not strictly: the first time, the pages link to the screenshots this takes
        site.build(Path(tmp), strict=False)
        with site.serve(Path(tmp)) as base:
            for name, (path, dark) in PAGES.items():
                # a browser each: the theme keeps the palette it first chose in local storage
                with harness.chromium(1280, 900) as driver:
                    harness.emulate(driver, dark=dark)  # before the page: read on load
                    driver.get(base + path)
                    harness.screenshot(driver, OUT / name, max_height=1600)
                print(f"docs/screenshots/{name}: {base + path}")


if __name__ == "__main__":
    main()
