"""The page browser: world pages by URL, and refusal of every non-public or non-allowlisted live fetch."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from orchestra.errors import ToolError
from orchestra.tools.browse import PageBrowser, address_problem, fetch_pinned
from orchestra.tools.pages import Page, PageStore
from orchestra.tools.webpage import parse_html, text_facts

LONG = " ".join(f"word{i}" for i in range(3000))
PAGES = [
    Page(
        url="https://world.local/wiki/velmora",
        title="Velmora",
        snippet="Velmora is a city.",
        text="Velmora\nVelmora is a city founded in 1204.",
        html='<html><body><h1>Velmora</h1><p>Twin: <a href="/wiki/tarsis">Tarsis</a></p></body></html>',
    ),
    Page(
        url="https://world.local/wiki/tarsis",
        title="Tarsis",
        snippet="Tarsis is a river.",
        text="Tarsis. " + LONG,
    ),
]
BAD_URLS = [
    "file:///etc/passwd",
    "http://127.0.0.1",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://0.0.0.0/",
]


@pytest.fixture()
def store() -> PageStore:
    return PageStore(PAGES, "test pages")


def open_browser(
    store: PageStore, resolver_map: dict[str, list[str]] | None = None, **kw: object
) -> PageBrowser:
    hosts = (
        "127.0.0.1",
        "169.254.169.254",
        "10.0.0.1",
        "::1",
        "::ffff:127.0.0.1",
        "0.0.0.0",
        "localhost",
        "metadata.test",
        "intranet.test",
        "2130706433",
    )
    if resolver_map is None:
        return PageBrowser(store, allow_http=True, allow_hosts=hosts, **kw)  # type: ignore[arg-type]
    return PageBrowser(
        store,
        allow_http=True,
        allow_hosts=hosts,  # type: ignore[arg-type]
        resolver=lambda host, port: resolver_map[host],
        **kw,
    )


def test_reads_world_pages_by_url_with_links_and_windows(store: PageStore) -> None:
    browser = PageBrowser(store, max_chars=500)
    obs = browser(url="https://world.local/wiki/velmora/#history")
    assert obs.ok and "founded in 1204" in obs.text and obs.data["title"] == "Velmora"
    assert obs.data["links"] == [{"url": "https://world.local/wiki/tarsis", "text": "Tarsis"}]
    first = browser(url="https://world.local/wiki/tarsis")
    assert first.data["next_offset"] == 500 and "pass offset=500" in first.text
    second = browser(url="https://world.local/wiki/tarsis", offset=500)
    assert second.data["offset"] == 500 and PAGES[1].text[500:1000] in second.text
    assert not browser(url="https://world.local/wiki/tarsis", offset=10**6).ok


def test_unknown_world_page_suggests_near_urls(store: PageStore) -> None:
    obs = PageBrowser(store)(url="https://world.local/wiki/velmra")
    assert not obs.ok and "did you mean https://world.local/wiki/velmora" in obs.error


@pytest.mark.parametrize("url", BAD_URLS)
def test_refuses_local_private_and_metadata_addresses(store: PageStore, url: str) -> None:
    for browser in (PageBrowser(store), open_browser(store)):
        obs = browser(url=url)
        assert not obs.ok and obs.error.startswith("ToolError: refused:"), obs.error
        assert "disabled" not in obs.error  # refused for what the address is, before any other rule


@pytest.mark.parametrize(
    ("host", "address", "why"),
    [
        ("localhost", None, "loopback"),  # the real resolver: /etc/hosts
        ("2130706433", None, "loopback"),  # 127.0.0.1 written as one number, resolved by the C library
        ("metadata.test", "169.254.169.254", "metadata"),
        ("intranet.test", "10.0.0.1", "private"),
    ],
)
def test_refuses_host_names_that_resolve_to_them(
    store: PageStore, host: str, address: str | None, why: str
) -> None:
    browser = (
        open_browser(store) if address is None else open_browser(store, {host: ["93.184.215.14", address]})
    )
    obs = browser(url=f"http://{host}/")
    assert not obs.ok and "resolves to" in obs.error and why in obs.error, obs.error


def test_live_fetching_is_off_by_default_and_allowlisted_when_on(store: PageStore) -> None:
    off = PageBrowser(store)(url="https://example.com/")
    assert not off.ok and "live HTTP fetching is disabled" in off.error
    on = PageBrowser(store, allow_http=True, allow_hosts=("example.com",))
    assert "not in the allowlist" in on(url="https://example.org/").error
    assert "not in the allowlist" in on(url="https://evil-example.com/").error
    assert "refused: scheme 'ftp'" in on(url="ftp://example.com/").error


def test_address_policy() -> None:
    assert address_problem("93.184.215.14") is None and address_problem("2606:4700::1111") is None
    for addr in (
        "127.0.0.2",
        "192.168.1.1",
        "172.16.0.1",
        "100.64.0.1",
        "fe80::1",
        "fd00:ec2::254",
        "224.0.0.1",
        "::",
        "2002:7f00:1::",
    ):
        assert address_problem(addr) is not None, addr


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/slow":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            for _ in range(50):
                self.wfile.write(b"x" * 10)
                self.wfile.flush()
                time.sleep(0.1)
            return
        body = (
            b"<html><head><title>Hi there</title><style>p{}</style></head><body><p>Hello &amp; welcome"
            b"<script>evil()</script></p><a href='/next'>next</a>" + b"z" * 5000 + b"</body></html>"
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server(loopback: Callable[[type[BaseHTTPRequestHandler]], int]) -> int:
    return loopback(_Handler)


def test_pinned_fetch_caps_size_and_time(server: int) -> None:
    url = f"http://site.test:{server}/"
    status, headers, body, truncated = fetch_pinned(url, "127.0.0.1", 1_000_000, time.monotonic() + 5)
    assert status == 200 and not truncated and headers["content-type"].startswith("text/html")
    page = parse_html(body.decode(), url)
    assert (
        page.title == "Hi there"
        and page.text.startswith("Hello & welcome")
        and "evil" not in page.text
        and "p{}" not in page.text
    )
    assert page.links == [{"url": f"http://site.test:{server}/next", "text": "next"}]
    assert page.facts == [] and page.facts_from == "none"
    _, _, small, cut = fetch_pinned(url, "127.0.0.1", 100, time.monotonic() + 5)
    assert cut and len(small) == 100
    start = time.monotonic()
    with pytest.raises(ToolError, match="time limit"):
        fetch_pinned(f"http://site.test:{server}/slow", "127.0.0.1", 1_000_000, time.monotonic() + 0.5)
    assert time.monotonic() - start < 2


def test_store_loading_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="cannot read the page store"):
        PageStore.load(tmp_path / "missing.jsonl")
    bad = tmp_path / "pages.jsonl"
    bad.write_text(json.dumps(PAGES[0].model_dump()) + "\n{not json\n")
    with pytest.raises(ToolError, match=r"pages.jsonl:2: not a valid page record"):
        PageStore.load(bad)
    bad.write_text((json.dumps(PAGES[0].model_dump()) + "\n") * 2)
    with pytest.raises(ToolError, match="duplicate page URL"):
        PageStore.load(bad)


INFOBOX = (
    "<html><head><title>Quillon - Wiki</title></head><body><h1>Quillon</h1><p>Founded: long ago.</p>"
    "<table class='infobox'><tr><th colspan=2>Quillon</th></tr>"
    "<tr><th>Population</th><td>12,400</td></tr>"
    "<tr><th scope=row>Twin town:</th><td><a href='/wiki/brenn'>Brenn</a> <sup>[1]</sup></td></tr>"
    "<tr><th>Mayor<td>Ada Vorn</tr>"  # cells and rows without end tags still count
    "<tr><td>no label</td><td>x</td></tr></table>"
    "<table><tr><th>Label</th><th>Only headers</th></tr></table></body></html>"
)


def test_html_table_rows_are_the_page_facts() -> None:
    page = parse_html(INFOBOX, "https://quillon.test/wiki/quillon")
    assert page.facts_from == "table"
    assert page.facts == [
        {"label": "Population", "value": "12,400"},
        {"label": "Twin town", "value": "Brenn [1]"},
        {"label": "Mayor", "value": "Ada Vorn"},
    ]
    assert "Population 12,400" in page.text  # the cells of a row stay apart in the text
    assert page.links == [{"url": "https://quillon.test/wiki/brenn", "text": "Brenn"}]


def test_text_facts_fallback() -> None:
    text = "Velmora\nNote: prose\nhttps://x.test/a\n\nFacts\nType: city\nFounded: 1204\nno colon here"
    assert text_facts(text) == [{"label": "Type", "value": "city"}, {"label": "Founded", "value": "1204"}]
    assert text_facts("Note: the whole text counts\nhttps://x.test/a") == [
        {"label": "Note", "value": "the whole text counts"}
    ]
    plain = parse_html("<p>Built: 1931</p><p>Architect: Ilse Marr</p>", "https://x.test/")
    assert plain.facts_from == "text" and plain.facts[1] == {"label": "Architect", "value": "Ilse Marr"}


def test_world_pages_carry_their_facts_in_every_window(small_world: Path) -> None:
    store = PageStore.from_world(small_world)
    browser = PageBrowser(store, max_chars=200)
    for page in store.pages[:25]:
        obs = browser(url=page.url)
        assert obs.ok and obs.data["facts_from"] == "table"
        assert obs.data["facts"] == text_facts(page.text)  # the infobox and the Facts section agree
        labels = [f["label"] for f in obs.data["facts"]]
        assert labels[:2] == ["Type", "Category"]
        nxt = obs.data["next_offset"]
        if nxt is not None:  # paging still works and carries the same facts
            more = browser(url=page.url, offset=nxt)
            assert more.ok and more.data["offset"] == nxt and more.data["facts"] == obs.data["facts"]
            assert page.text[nxt : nxt + 200] in more.text


def test_page_without_html_reads_its_facts_from_text(store: PageStore) -> None:
    facts_page = Page(url="https://world.local/wiki/oda", title="Oda", text="Oda\n\nFacts\nLength (km): 88")
    obs = PageBrowser(PageStore([facts_page], "t"))(url=facts_page.url)
    assert obs.data["facts"] == [{"label": "Length (km)", "value": "88"}] and obs.data["facts_from"] == "text"
    obs = PageBrowser(store)(url=PAGES[0].url)
    assert obs.ok and obs.data["facts"] == [] and obs.data["facts_from"] == "none"
