"""Headless Chromium for the page tests: Debian's `chromium` and
`chromium-driver`, driven by Selenium, with axe-core injected for accessibility.

Outside CI a machine without them skips the browser tests with the reason; in
CI (`CI` set to true) a missing browser fails them, so they never silently
skip there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
# axe's impact levels that fail a page.
BLOCKING = ("serious", "critical")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_browser() -> None:
    """Skip (fail in CI) when selenium, chromium or chromedriver is missing."""
    missing = [
        name
        for name, found in (
            ("chromium", CHROMIUM),
            ("chromedriver (chromium-driver)", DRIVER),
            ("selenium", _has_selenium()),
        )
        if not found
    ]
    if not missing:
        return
    why = f"{', '.join(missing)} not installed (.ci/run installs them)"
    if in_ci():
        pytest.fail(f"browser tests cannot run in CI: {why}", pytrace=False)
    pytest.skip(why, allow_module_level=True)


def _has_selenium() -> bool:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return True


def browser(width: int = 1280, height: int = 1000) -> Any:
    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for a in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=webdriver.ChromeService(str(DRIVER)))


def axe_violations(b: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of the page loaded in `b`."""
    b.execute_script(AXE.read_text())
    result = b.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))))"
        ".catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e), nodes: []}]));"
    )
    return [v for v in result if v.get("impact") in BLOCKING]


def set_width(b: Any, width: int) -> None:
    """Lay pages out `width` CSS pixels wide; below 600, as a phone (the viewport
    meta applies; headless Chromium's window cannot be narrower than 500)."""
    if width < 600:
        b.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 844, "deviceScaleFactor": 1, "mobile": True},
        )
    else:
        b.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        b.set_window_size(width, 1000)


def page_width(b: Any) -> int:
    return int(b.execute_script("return document.documentElement.scrollWidth"))


def full_screenshot(b: Any, path: Path, width: int = 1280) -> None:
    """The whole page, top to bottom, at `width`."""
    set_width(b, width)
    height = int(b.execute_script("return document.documentElement.scrollHeight"))
    if width < 600:
        b.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": min(height, 8000), "deviceScaleFactor": 1, "mobile": True},
        )
    else:
        b.set_window_size(width, min(height + 120, 8000))
    b.save_screenshot(str(path))
    set_width(b, 1280)
