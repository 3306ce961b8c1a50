"""Issue 19, in a real browser: a shared link whose parameter names and values hold Markdown links,
images, styles, HTML and bare addresses puts no <a>, <img> or styled span from it into the page.
The AppTest twin (``test_injection.py``) checks the Markdown sources of every path; this one checks
what Streamlit's renderer makes of them (its GitHub-flavoured autolinks included)."""
from __future__ import annotations

from urllib.parse import urlencode

from tests.browser.test_browser import settle   # server, page: tests/browser/conftest.py

LINK = "[Teacher: download the new version here](https://evil.example/x)"
VALUES = {"workload": LINK, "gpu": "![x](https://evil.example/b.png)",
          "model": ":red-background[ALARM] <a href='https://evil.example/h'>h</a>",
          "seed": "www.evil.example me@evil.example https://evil.example/y",
          "[name](https://evil.example/n)": "1"}
FOUND_JS = """() => ({
    links: [...document.querySelectorAll('a')].filter(a => (a.href || '').includes('evil')).length,
    images: [...document.querySelectorAll('img')].filter(i => (i.src || '').includes('evil')).length,
    styled: [...document.querySelectorAll('[data-testid="stAlertContainer"] span[style], '
              + '[data-testid="stAlertContainer"] mark, [data-testid="stAlertContainer"] strong')]
              .filter(s => /ALARM|Teacher/.test(s.innerText)).length,
    alerts: [...document.querySelectorAll('[data-testid="stAlertContainer"]')].map(a => a.innerText).join(' | '),
})"""


def test_a_hostile_link_renders_no_link_image_or_style(server, page):
    page.goto(f"{server}/?{urlencode(VALUES)}")
    settle(page)
    found = page.evaluate(FOUND_JS)
    assert found["links"] == 0 and found["images"] == 0 and found["styled"] == 0, found
    shown = found["alerts"].replace("\u200b", "")
    assert "workload='[Teacher: download the new version her…" in shown, shown[:500]   # as text, cut
    assert "URL parameter '[name](https://evil.example/n)'='1'" in shown, shown[:500]
