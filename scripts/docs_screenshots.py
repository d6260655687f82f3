"""Screenshots of the built docs site (`make docs` first): its home page and the params reference,
taken with headless Chromium (the system's, through Playwright, as scripts/ui_screenshots.py does).

    .venv/bin/python scripts/docs_screenshots.py [--site site] [--out docs]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ui_screenshots import find_chromium  # noqa: E402

PAGES = {"docs_home.png": "index.html", "docs_params_reference.png": "reference/params.html"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", type=Path, default=Path("site"))
    ap.add_argument("--out", type=Path, default=Path("docs"))
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(), headless=True, args=["--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for name, rel in PAGES.items():
            target = (args.site / rel).resolve()
            if not target.is_file():
                print(f"error: {target} missing: run `make docs` first", file=sys.stderr)
                return 2
            page.goto(target.as_uri(), wait_until="load")
            page.screenshot(path=str(args.out / name))
            print(f"wrote {args.out / name}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
