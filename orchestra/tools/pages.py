"""The page store: the world's web pages (kb/pages.jsonl) by URL, as search and the browser see them."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestra.errors import ToolError

PAGES_FILE = Path("kb") / "pages.jsonl"


class Page(BaseModel):
    """One page. Unknown keys in the file are ignored: tools read only what a real web page shows."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    url: str
    title: str
    snippet: str = ""
    text: str
    html: str = ""


def normalize_url(url: str) -> str:
    """Comparable form of a URL: lowercase scheme and host, no fragment, no trailing slash on the path."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/") or "/"
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


class PageStore:
    """Pages by URL, in file order. Duplicate URLs are refused."""

    def __init__(self, pages: Iterable[Page], source: str) -> None:
        self.source = source
        self.pages: tuple[Page, ...] = tuple(pages)
        self._by_url: dict[str, Page] = {}
        for page in self.pages:
            key = normalize_url(page.url)
            if key in self._by_url:
                raise ToolError(f"{source}: duplicate page URL {page.url!r}")
            self._by_url[key] = page

    @classmethod
    def load(cls, path: Path) -> PageStore:
        """Read a pages.jsonl file; a missing file or a bad line raises ToolError naming it."""
        path = Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ToolError(f"{path}: cannot read the page store: {e.strerror or e}") from e
        pages = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                pages.append(Page.model_validate(json.loads(line)))
            except (json.JSONDecodeError, ValidationError) as e:
                raise ToolError(f"{path}:{n}: not a valid page record: {e}") from e
        return cls(pages, str(path))

    @classmethod
    def from_world(cls, world_dir: Path) -> PageStore:
        """The page store of a generated world (or of the seed_tasks folder that holds its kb/)."""
        return cls.load(Path(world_dir) / PAGES_FILE)

    @classmethod
    def empty(cls, reason: str) -> PageStore:
        """A store with no pages; ``reason`` says why, and every tool that reads it repeats it."""
        return cls((), reason)

    def get(self, url: str) -> Page | None:
        return self._by_url.get(normalize_url(url))

    def closest_urls(self, url: str, n: int = 3) -> list[str]:
        """Stored URLs that look most like ``url`` (for 'did you mean' hints)."""
        keys = difflib.get_close_matches(normalize_url(url), list(self._by_url), n=n, cutoff=0.6)
        return [self._by_url[k].url for k in keys]

    def __len__(self) -> int:
        return len(self.pages)
