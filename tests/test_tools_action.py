"""Web search (local FTS5/BM25 and the Brave API client), the default registry and `orchestra tools`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from orchestra.config import ToolParams
from orchestra.errors import ToolError
from orchestra.tools.cli import app, parse_args
from orchestra.tools.loader import load_tool_class
from orchestra.tools.pages import Page, PageStore
from orchestra.tools.registry import ACTION_TOOLS, PERCEPTION_TOOLS, default_registry
from orchestra.tools.search import BraveSearchBackend, LocalSearchBackend, WebSearch


def page(slug: str, title: str, text: str) -> Page:
    return Page(
        url=f"https://world.local/wiki/{slug}",
        title=title,
        snippet=text.split(".")[0] + ".",
        text=f"{title}\n{text}",
        html=f"<h1>{title}</h1><p>{text}</p>",
    )


PAGES = [
    page("velmora_hall", "Velmora Hall", "Velmora Hall is a concert venue in Tarsis. It opened in 1931."),
    page("velmura_hall", "Velmura Hall", "Velmura Hall is a museum in Brenn. It opened in 1877."),
    page("new_velmora", "New Velmora", "New Velmora is a town. It was founded in 1650 by settlers."),
    page("tarsis", "Tarsis", "Tarsis is a city on the river Oda. Velmora Hall stands in Tarsis."),
    page("oda", "Oda", "The Oda is a river. " + "It floods. " * 30),
    page("brenn", "Brenn", "Brenn is a village known for cheese and a river festival."),
]


@pytest.fixture(scope="module")
def search() -> WebSearch:
    return WebSearch(pages=PageStore(PAGES, "test pages"))


@pytest.fixture()
def world(small_world: Path) -> Path:
    """The session's generated world (tests here only read it)."""
    return small_world


def urls(obs: Any) -> list[str]:
    return [r["url"] for r in obs.data["results"]]


def test_exact_name_beats_its_near_namesakes(search: WebSearch) -> None:
    obs = search(query="Velmora Hall")
    assert obs.ok and urls(obs)[0].endswith("/velmora_hall")
    assert set(urls(obs)[:3]) >= {PAGES[0].url, PAGES[1].url}
    assert urls(search(query="Velmura Hall"))[0].endswith("/velmura_hall")
    assert urls(search(query="New Velmora"))[0].endswith("/new_velmora")
    assert "1. Velmora Hall — https://world.local/wiki/velmora_hall" in obs.text


def test_questions_and_misspelled_names_find_the_page(search: WebSearch) -> None:
    assert urls(search(query="In which year did the Velmora Hall open?"))[0].endswith("/velmora_hall")
    assert urls(search(query="Velmorra Hal"))[0].endswith("/velmora_hall")  # OCR-style errors: trigram index
    assert urls(search(query="cheese festival"))[0].endswith("/brenn")  # body text, stemmed: festival(s)


def test_bm25_ranks_by_rarity_not_by_mere_presence() -> None:
    backend = LocalSearchBackend(PageStore(PAGES, "test pages"))
    hits = backend.search("river floods", 6)
    assert hits[0].url.endswith("/oda")  # 'floods' is rare and frequent on that page
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


def test_k_and_bad_queries_are_handled(search: WebSearch) -> None:
    assert len(search(query="river", k=2).data["results"]) == 2
    for kwargs in (
        {"query": ""},
        {"query": "?!"},
        {"query": "river", "k": 0},
        {"query": "river", "k": 99},
        {},
    ):
        obs = search(**kwargs)
        assert not obs.ok and obs.error
    assert search(query="zzzqqq").ok and search(query="zzzqqq").data["results"] == []
    empty = WebSearch(pages=PageStore.empty("no world was given"))(query="river")
    assert not empty.ok and "no world was given" in empty.error


def test_search_over_a_generated_world_finds_every_entity(world: Path) -> None:
    store = PageStore.from_world(world)
    search = WebSearch(pages=store)
    top5 = sum(p.url in urls(search(query=p.title)) for p in store.pages)
    top1 = sum(urls(search(query=p.title))[0] == p.url for p in store.pages)
    assert len(store) >= 60 and top5 == len(store) and top1 >= 0.95 * len(store)


class _Brave(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []
    reply: tuple[int, bytes] = (200, b"{}")

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        parts = urlsplit(self.path)
        type(self).seen.append(
            {
                "path": parts.path,
                "query": parse_qs(parts.query),
                "token": self.headers.get("X-Subscription-Token"),
            }
        )
        status, body = type(self).reply
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def brave(monkeypatch: pytest.MonkeyPatch, loopback: Callable[[type[BaseHTTPRequestHandler]], int]) -> str:
    _Brave.seen = []
    monkeypatch.setenv("TEST_BRAVE_KEY", "key-123")
    return f"http://127.0.0.1:{loopback(_Brave)}/res/v1/web/search"


def test_brave_backend_request_and_response(brave: str) -> None:
    results = [
        {
            "title": "<strong>Velmora</strong> Hall",
            "url": "https://example.org/velmora",
            "description": "A <strong>hall</strong> in Tarsis.",
        },
        {"title": "Other", "url": "https://example.org/other", "description": "x"},
    ]
    _Brave.reply = (200, json.dumps({"type": "search", "web": {"results": results}}).encode())
    tool = WebSearch(backend=BraveSearchBackend("TEST_BRAVE_KEY", endpoint=brave, timeout_s=5))
    obs = tool(query="Velmora Hall", k=1)
    assert obs.ok and obs.data["backend"] == "brave"
    assert obs.data["results"] == [
        {
            "rank": 1,
            "url": "https://example.org/velmora",
            "title": "Velmora Hall",
            "snippet": "A hall in Tarsis.",
            "score": 1.0,
        }
    ]
    assert _Brave.seen == [
        {"path": "/res/v1/web/search", "query": {"q": ["Velmora Hall"], "count": ["1"]}, "token": "key-123"}
    ]


def test_brave_backend_failures_are_observations(brave: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = WebSearch(backend=BraveSearchBackend("TEST_BRAVE_KEY", endpoint=brave, timeout_s=5))
    _Brave.reply = (401, b'{"error": "bad key"}')
    assert "HTTP 401" in tool(query="x").error and "bad key" in tool(query="x").error
    _Brave.reply = (200, b"not json")
    assert "not the expected JSON" in tool(query="x").error
    monkeypatch.delenv("TEST_BRAVE_KEY")
    assert "$TEST_BRAVE_KEY" in tool(query="x").error
    dead = WebSearch(
        backend=BraveSearchBackend("TEST_BRAVE_KEY", endpoint="http://127.0.0.1:9/x", timeout_s=2)
    )
    monkeypatch.setenv("TEST_BRAVE_KEY", "k")
    assert "unreachable" in dead(query="x").error


def test_default_registry_holds_every_tool(world: Path) -> None:
    reg = default_registry(world, ToolParams())
    expected = {load_tool_class(spec).name for spec in PERCEPTION_TOOLS + ACTION_TOOLS}
    assert set(reg.names()) == expected >= {"web_search", "page_browser", "code_executor"}
    with pytest.raises(ToolError, match="valid tools: .*web_search"):
        reg.get("web_serch")
    with pytest.raises(ToolError, match="cannot import"):
        load_tool_class("orchestra.tools.no_such_module:Tool")
    with pytest.raises(ToolError, match="no Tool class"):
        load_tool_class("orchestra.tools.search:NoSuchTool")
    with default_registry(world / "media", ToolParams(workers=0)) as bare:  # a seed folder without a KB
        obs = bare.get("web_search")(query="anything")
    assert not obs.ok and "has no knowledge base (kb/pages.jsonl)" in (obs.error or "")


def test_tools_read_only_the_page_store_of_a_world(world: Path, tmp_path: Path) -> None:
    shutil.copytree(world / "kb", tmp_path / "kb")  # no truth/, no tasks.json, no media
    reg = default_registry(tmp_path)
    first = PageStore.from_world(world).pages[0]
    assert reg.get("web_search")(query=first.title).data["results"][0]["url"] == first.url
    assert reg.get("page_browser")(url=first.url).data["title"] == first.title


def test_parse_args() -> None:
    assert parse_args(["k=3", "query=Velmora Hall", "flag=true", 'obj={"a": 1}', 's="7"']) == {
        "k": 3,
        "query": "Velmora Hall",
        "flag": True,
        "obj": {"a": 1},
        "s": "7",
    }
    with pytest.raises(ToolError):
        parse_args(["novalue"])
    schema = WebSearch.input_schema  # query is a string, k an integer: 'query=2021' stays text
    assert parse_args(["query=2021", "k=3"], schema) == {"query": "2021", "k": 3}


def test_cli_lists_and_runs_every_kind_of_tool(world: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["list"])
    names = {load_tool_class(spec).name for spec in PERCEPTION_TOOLS + ACTION_TOOLS}
    assert listed.exit_code == 0 and {line.split()[0] for line in listed.output.splitlines()} == names
    specs = json.loads(runner.invoke(app, ["list", "--json"]).output)
    assert {s["name"] for s in specs} == names and all(s["input_schema"]["type"] == "object" for s in specs)

    first = PageStore.from_world(world).pages[0]
    params = ["--params", str(tmp_path / "absent.yaml"), "--world", str(world)]
    found = runner.invoke(
        app, ["run", "web_search", "--arg", f"query={first.title}", "--arg", "k=2", *params, "--json"]
    )
    assert found.exit_code == 0, found.output
    assert json.loads(found.output)["data"]["results"][0]["url"] == first.url
    read = runner.invoke(app, ["run", "page_browser", "--arg", f"url={first.url}", *params])
    assert read.exit_code == 0 and first.title in read.output
    code = runner.invoke(app, ["run", "code_executor", "--arg", "code=sum(range(10))", *params])
    assert code.exit_code == 0 and "value: 45" in code.output
    wav = sorted((world / "media").rglob("*.wav"))[0]
    heard = runner.invoke(app, ["run", "audio_tones", "--input", str(wav), *params, "--json"])
    assert heard.exit_code == 0 and json.loads(heard.output)["ok"] is True, heard.output


def test_cli_errors_are_clear(world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    params = ["--params", str(tmp_path / "absent.yaml"), "--world", str(world)]
    missing = runner.invoke(
        app,
        [
            "run",
            next(load_tool_class(s).name for s in PERCEPTION_TOOLS),
            "--input",
            str(tmp_path / "missing.wav"),
            *params,
        ],
    )
    assert missing.exit_code == 1 and "failed]" in missing.output and "missing.wav" in missing.output
    unknown = runner.invoke(app, ["run", "web_serch", *params])
    assert unknown.exit_code == 2 and "valid tools:" in unknown.output
    no_input = runner.invoke(app, ["run", "web_search", "--input", "x.png", *params])
    assert no_input.exit_code == 2 and "takes no --input" in no_input.output
    monkeypatch.chdir(tmp_path)  # no params.yaml, no data/seed_tasks here
    no_world = runner.invoke(app, ["run", "web_search", "--arg", "query=x"])
    assert no_world.exit_code == 1 and "no world pages at" in no_world.output and "--world" in no_world.output
    bad_world = runner.invoke(app, ["run", "web_search", "--arg", "query=x", "--world", str(tmp_path)])
    assert bad_world.exit_code == 2 and "cannot read the page store" in bad_world.output
