"""A page as a person sees it: rendered by headless Chromium (Debian's) through Playwright, with its console errors, the
requests it made, and the text that overlaps or overflows."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

WIDTHS = (1280, 390)

# Leaf elements that show text; any two whose boxes intersect overlap, any one past the viewport (or its SVG) overflows.
LAYOUT = """() => {
  const boxes = [], problems = [];
  const leaves = [...document.querySelectorAll('body *')].filter(e => !['SCRIPT', 'STYLE', 'TITLE'].includes(e.tagName)
      && e.children.length === 0 && e.textContent.trim() && !e.closest('title'));
  const width = document.documentElement.clientWidth;
  if (document.scrollingElement.scrollWidth > width + 1)
    problems.push('the page scrolls sideways: ' + document.scrollingElement.scrollWidth + ' > ' + width);
  for (const e of leaves) {
    const r = e.getBoundingClientRect();
    if (r.width < 1 || r.height < 1) continue;
    const name = e.tagName + ' "' + e.textContent.slice(0, 40) + '"';
    const svg = e.closest('svg');
    const frame = svg ? svg.getBoundingClientRect() : null;
    if (frame && (r.left < frame.left - 1 || r.right > frame.right + 1))
      problems.push('overflows its plot: ' + name);
    const scroller = e.closest('.scroll');
    if (!scroller && r.right > width + 1) problems.push('overflows the page: ' + name);
    if (!scroller && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).display !== 'inline')
      problems.push('text cut off: ' + name);
    boxes.push([r, name, e]);
  }
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, an, ae] = boxes[i], [b, bn, be] = boxes[j];
    const x = Math.min(a.right, b.right) - Math.max(a.left, b.left), y = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (x > 1 && y > 1 && ae.closest('.scroll') === be.closest('.scroll')) problems.push('overlap: ' + an + ' and ' + bn);
  }
  return problems;
}"""


@dataclass
class Look:
    """What one rendering showed."""

    dom: str
    text: str
    errors: list[str] = field(default_factory=list)  # console errors, page errors, dialogs
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    layout: list[str] = field(default_factory=list)  # overlaps and overflows
    attrs: list[tuple[str, str]] = field(default_factory=list)  # (data-rule, data-subject) of each diagnosis shown


def chromium() -> str:
    """The Chromium binary (Debian's package), or skip."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium is not installed (Debian package: chromium)")
    return path


class Browser:
    """One headless Chromium for a test; look() renders a URL at a width."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self.browser = self._playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])

    def close(self) -> None:
        """Close the browser and the Playwright driver."""
        self.browser.close()
        self._playwright.stop()

    def look(self, url: str, width: int, shot: Path | None = None, wait_for=None) -> Look:
        """Render url at this width (until wait_for(page) returns, when given), then read it."""
        page = self.browser.new_page(viewport={"width": width, "height": 900})
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
                else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(url, wait_until="load", timeout=120_000)
        if wait_for:
            wait_for(page)
        if shot:
            page.screenshot(path=str(shot), full_page=True, timeout=180_000)
        attrs = page.eval_on_selector_all("article.diagnosis",
                                          "es => es.map(e => [e.dataset.rule, e.dataset.subject])")
        look = Look(page.content(), page.inner_text("body"), errors, requests, page.evaluate(LAYOUT),
                    [tuple(a) for a in attrs])
        page.close()
        return look
