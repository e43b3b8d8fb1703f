"""The dashboard in a real headless Chromium (Debian's), driven by Selenium; and its screenshots."""
