"""The page browser: page text by URL from the world's store; live HTTP(S) for allowlisted hosts."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, ClassVar
from urllib.parse import urljoin, urlsplit

from orchestra.errors import ToolError
from orchestra.tools.base import Observation, Tool
from orchestra.tools.pages import PageStore
from orchestra.tools.webpage import WebPage, parse_html, text_page

Resolver = Callable[[str, int], list[str]]
METADATA_ADDRESSES = frozenset({"169.254.169.254", "fd00:ec2::254", "100.100.100.200"})
MAX_REDIRECTS = 5


def address_problem(address: str) -> str | None:
    """Why ``address`` must not be fetched (loopback, private, link-local, metadata...), or None."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        for embedded in (ip.ipv4_mapped, ip.sixtofour, (ip.teredo or (None, None))[1]):
            if embedded is not None:
                return address_problem(str(embedded))
    if str(ip) in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for label, flag in (
        ("loopback", ip.is_loopback),
        ("private", ip.is_private),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("reserved", ip.is_reserved),
    ):
        if flag:
            return f"a {label} address"
    if not ip.is_global:
        return "not a globally routable address"
    return None


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (A and AAAA)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to an already-vetted address, with the certificate checked against the original host name."""

    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


def fetch_pinned(
    url: str, address: str, max_bytes: int, deadline: float
) -> tuple[int, dict[str, str], bytes, bool]:
    """GET ``url`` from ``address``, no policy checks: (status, headers, body ≤ max_bytes, truncated)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    left = deadline - time.monotonic()
    if left <= 0:
        raise ToolError("the fetch time limit was used up")
    conn_cls = _PinnedHTTPS if parts.scheme == "https" else _PinnedHTTP
    conn = conn_cls(host, address, port, left)
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request(
            "GET", path, headers={"User-Agent": "orchestra-page-browser/0.1", "Accept": "text/html, text/*"}
        )
        resp = conn.getresponse()
        body, truncated = bytearray(), False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ToolError("the fetch time limit was exceeded while reading the page")
            if conn.sock is not None:
                conn.sock.settimeout(left)
            chunk = resp.read1(min(65536, max_bytes + 1 - len(body)))
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                del body[max_bytes:]
                truncated = True
                break
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, bytes(body), truncated
    except TimeoutError as e:
        raise ToolError(f"fetching {url} failed: the fetch time limit was exceeded") from e
    except (OSError, http.client.HTTPException) as e:
        raise ToolError(f"fetching {url} failed: {e}") from e
    finally:
        conn.close()


class PageBrowser(Tool):
    """Read a web page's text by URL, in windows of ``max_chars`` characters.

    The observation's ``data`` holds the window's paging (``offset``; ``next_offset``, None on the
    last window; ``total_chars``) and, whichever window is shown, the whole page's ``title``,
    ``links`` and ``facts``: ``[{"label", "value"}]`` read from its HTML table rows (an infobox),
    else from the ``Label: value`` lines of its text; ``facts_from`` says which
    (:class:`~orchestra.tools.webpage.WebPage`).
    """

    name: ClassVar[str] = "page_browser"
    description: ClassVar[str] = (
        "Open a web page by URL and read its text (and its links). Long pages come in windows: pass "
        "offset to read on. Only http(s) URLs; pages come from the local web, live fetching only if enabled."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "the page URL, e.g. from a web_search result"},
            "offset": {"type": "integer", "minimum": 0, "description": "character offset to read from"},
        },
        "required": ["url"],
    }

    def __init__(
        self,
        pages: PageStore,
        allow_http: bool = False,
        allow_hosts: Sequence[str] = (),
        max_bytes: int = 2_000_000,
        timeout_s: float = 10.0,
        max_chars: int = 6000,
        resolver: Resolver = system_resolver,
    ) -> None:
        self.pages, self.allow_http = pages, allow_http
        self.allow_hosts = tuple(h.lower().strip(".") for h in allow_hosts)
        self.max_bytes, self.timeout_s, self.max_chars, self.resolver = (
            max_bytes,
            timeout_s,
            max_chars,
            resolver,
        )

    def run(self, url: str, offset: int = 0) -> Observation:
        if not url.strip():
            raise ToolError("url must be a non-empty string")
        offset = int(offset)
        if offset < 0:
            raise ToolError("offset must be >= 0")
        page = self.pages.get(url)
        if page is not None:
            return self._window(text_page(page.url, page.title, page.text, page.html), offset, "store")
        return self._window(self._fetch(url.strip()), offset, "http")

    def _window(self, page: WebPage, offset: int, source: str) -> Observation:
        """The window of ``page.text`` from ``offset``, with the whole page's links and facts in ``data``."""
        text = page.text
        if offset and offset >= len(text):
            raise ToolError(f"offset {offset} is past the end of the page ({len(text)} characters)")
        chunk = text[offset : offset + self.max_chars]
        end = offset + len(chunk)
        more = (
            f"\n[characters {offset}-{end} of {len(text)}; pass offset={end} to read on]"
            if end < len(text)
            else ""
        )
        shown = "".join(f"\n- {ln['text'] or ln['url']}: {ln['url']}" for ln in page.links[:10])
        link_text = f"\nLinks:{shown}" if shown and end >= len(text) else ""
        data = {
            "url": page.url,
            "title": page.title,
            "offset": offset,
            "next_offset": end if end < len(text) else None,
            "total_chars": len(text),
            "links": page.links[:50],
            "facts": page.facts,
            "facts_from": page.facts_from,
            "source": source,
        }
        return Observation(
            tool=self.name, text=f"{page.title}\n{page.url}\n\n{chunk}{more}{link_text}", data=data
        )

    def check_url(self, url: str) -> tuple[str, int]:
        """The vetted (address, port) for a live fetch of ``url``; raises ToolError naming the refusal."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ToolError(f"refused: scheme {parts.scheme or '(none)'!r} is not allowed, only http(s)")
        host = (parts.hostname or "").lower()
        if not host:
            raise ToolError(f"refused: {url!r} has no host")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as e:
            raise ToolError(f"refused: bad port in {url!r}") from e
        try:
            problem = address_problem(host)
        except ValueError:
            problem = None  # a host name, checked after resolution below
        if problem:
            raise ToolError(f"refused: {host} is {problem}")
        if self.pages.get(url) is None and host.endswith(".local"):
            hint = self.pages.closest_urls(url)
            raise ToolError(
                f"no page at {url} in the page store ({self.pages.source})"
                + (f"; did you mean {', '.join(hint)}?" if hint else "")
            )
        if not self.allow_http:
            raise ToolError(
                f"refused: live HTTP fetching is disabled (tools.browser.allow_http: false); "
                f"{url} is not in the page store"
            )
        if not any(host == h or host.endswith("." + h) for h in self.allow_hosts):
            raise ToolError(f"refused: host {host} is not in the allowlist {list(self.allow_hosts)}")
        try:
            addresses = self.resolver(host, port)
        except OSError as e:
            raise ToolError(f"cannot resolve {host}: {e}") from e
        if not addresses:
            raise ToolError(f"cannot resolve {host}: no addresses")
        for address in addresses:
            problem = address_problem(address)
            if problem:
                raise ToolError(f"refused: {host} resolves to {address}, {problem}")
        return addresses[0], port

    def _fetch(self, url: str) -> WebPage:
        deadline = time.monotonic() + self.timeout_s
        for _ in range(MAX_REDIRECTS + 1):
            address, _port = self.check_url(url)
            status, headers, body, truncated = fetch_pinned(url, address, self.max_bytes, deadline)
            if status in (301, 302, 303, 307, 308) and headers.get("location"):
                url = urljoin(url, headers["location"])
                continue
            if not 200 <= status < 300:
                raise ToolError(f"{url} answered HTTP {status}")
            kind = headers.get("content-type", "text/html").split(";")[0].strip().lower()
            charset = "utf-8"
            for param in headers.get("content-type", "").split(";")[1:]:
                if param.strip().lower().startswith("charset="):
                    charset = param.split("=", 1)[1].strip().strip('"')
            try:
                decoded = body.decode(charset, "replace")
            except LookupError:
                decoded = body.decode("utf-8", "replace")
            note = f"\n[page cut at {self.max_bytes} bytes]" if truncated else ""
            if kind in ("text/html", "application/xhtml+xml"):
                page = parse_html(decoded, url)
                return replace(page, title=page.title or url, text=page.text + note)
            if kind.startswith("text/") or kind in ("application/json", "application/xml"):
                return text_page(url, url, decoded + note)
            raise ToolError(f"{url} is {kind}, not a text page")
        raise ToolError(f"too many redirects (more than {MAX_REDIRECTS})")
