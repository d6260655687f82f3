"""What the page browser reads from a page: its title, visible text, links and Label/value facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urljoin

__all__ = ["MAX_FACTS", "WebPage", "parse_html", "text_facts", "text_page"]

MAX_FACTS = 200
MAX_LABEL = 60
_BLOCK_TAGS = {
    "p",
    "div",
    "br",
    "li",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "section",
    "article",
    "table",
    "ul",
    "ol",
    "header",
    "footer",
    "pre",
    "blockquote",
    "title",
}
_SKIP_TAGS = {"script", "style", "noscript", "template", "svg"}


@dataclass(frozen=True)
class WebPage:
    """A page as the browser sees it. ``facts`` are ``{"label", "value"}`` dicts; ``facts_from`` says
    where they were read: ``"table"`` (HTML table rows of one header cell and one data cell, such as
    an infobox), ``"text"`` (the fallback: ``Label: value`` lines of the text) or ``"none"``."""

    url: str
    title: str
    text: str
    links: list[dict[str, str]] = field(default_factory=list)
    facts: list[dict[str, str]] = field(default_factory=list)
    facts_from: str = "none"


class _Extractor(HTMLParser):
    """Visible text, the title, links and two-cell ``<tr><th>label</th><td>value</td></tr>`` rows."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self.links: list[tuple[str, str]] = []
        self.facts: list[dict[str, str]] = []
        self._skip = 0
        self._in_title = False
        self._href: str | None = None
        self._anchor: list[str] = []
        self._row: list[tuple[str, str]] | None = None
        self._cell: tuple[str, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        if tag == "title":
            self._in_title = True
        if tag == "a":
            self._href, self._anchor = dict(attrs).get("href"), []
        if tag == "tr":
            self.end_row()
            self._row = []
        if tag in ("th", "td"):
            self._end_cell()
            self.parts.append(" ")  # cells of one row stay apart on their line
            if self._row is not None:
                self._cell = (tag, [])
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False
        if tag == "a" and self._href:
            self.links.append((self._href, " ".join("".join(self._anchor).split())))
            self._href = None
        if tag in ("th", "td"):
            self._end_cell()
        if tag in ("tr", "table"):
            self.end_row()
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
            return
        if self._skip:
            return
        self.parts.append(data)
        if self._href is not None:
            self._anchor.append(data)
        if self._cell is not None:
            self._cell[1].append(data)

    def _end_cell(self) -> None:
        if self._cell is not None and self._row is not None:
            tag, parts = self._cell
            self._row.append((tag, " ".join("".join(parts).split())))
        self._cell = None

    def end_row(self) -> None:
        """Close the open row; a header cell then a data cell, both non-empty, is a fact."""
        self._end_cell()
        row, self._row = self._row, None
        if row is None or len(row) != 2 or [t for t, _ in row] != ["th", "td"]:
            return
        label, value = row[0][1].rstrip(":").strip(), row[1][1]
        if label and value and len(label) <= MAX_LABEL and len(self.facts) < MAX_FACTS:
            self.facts.append({"label": label, "value": value})

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def text_facts(text: str) -> list[dict[str, str]]:
    """The fallback for pages without table facts: the ``Label: value`` lines of the text's ``Facts``
    section when it has one (a line reading ``Facts``), else of the whole text. A label is at most
    60 characters; a value starting with ``//`` (a URL split at its scheme) is not a fact."""
    lines = text.splitlines()
    if "Facts" in (line.strip() for line in lines):
        lines = lines[[line.strip() for line in lines].index("Facts") + 1 :]
    facts = []
    for line in lines:
        label, sep, value = line.partition(":")
        label, value = label.strip(), value.strip()
        if sep and label and value and len(label) <= MAX_LABEL and not value.startswith("//"):
            facts.append({"label": label, "value": value})
    return facts[:MAX_FACTS]


def _with_facts(page: WebPage, table: list[dict[str, str]], text: str) -> WebPage:
    if table:
        return WebPage(page.url, page.title, page.text, page.links, table, "table")
    found = text_facts(text)
    return WebPage(page.url, page.title, page.text, page.links, found, "text" if found else "none")


def parse_html(html: str, base_url: str) -> WebPage:
    """An HTML document as a :class:`WebPage` (title, visible text, links as ``{url, text}``, facts)."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    parser.end_row()
    links = [
        {"url": urljoin(base_url, href), "text": text}
        for href, text in parser.links
        if not href.startswith(("#", "javascript:", "mailto:"))
    ]
    text = parser.text()
    page = WebPage(base_url, " ".join(parser.title.split()), text, links)
    return _with_facts(page, parser.facts, text)


def text_page(url: str, title: str, text: str, html: str = "") -> WebPage:
    """A page known by its text (a stored page, a plain-text answer); ``html``, when given, supplies
    the links and the table facts (the facts fall back to the text's ``Label: value`` lines)."""
    parsed = parse_html(html, url) if html else None
    page = WebPage(url, title, text, parsed.links if parsed else [])
    return _with_facts(page, parsed.facts if parsed and parsed.facts_from == "table" else [], text)
