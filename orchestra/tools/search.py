"""The web-search tool: a pluggable backend; SQLite FTS5/BM25 over the page store by default, Brave by key."""

from __future__ import annotations

import difflib
import json
import os
import re
import sqlite3
import threading
import urllib.error
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from orchestra.errors import ToolError
from orchestra.tools.base import Observation, Tool
from orchestra.tools.pages import PageStore

BRAVE_ENDPOINT = "https://api.search.brave.com/res/v1/web/search"
_WORD = re.compile(r"\w+", re.UNICODE)
_TAG = re.compile(r"<[^>]+>")
MAX_K = 20


class SearchHit(BaseModel):
    """One ranked result."""

    rank: int
    url: str
    title: str
    snippet: str
    score: float


class SearchBackend(ABC):
    """Where results come from. One method: ``search``."""

    name: ClassVar[str]

    @abstractmethod
    def search(self, query: str, k: int) -> list[SearchHit]:
        """The ``k`` best hits for ``query``, best first; raises ToolError when the backend fails."""


def _terms(text: str) -> list[str]:
    return [t.lower() for t in _WORD.findall(text)]


class LocalSearchBackend(SearchBackend):
    """BM25 ranking by SQLite FTS5 (porter-stemmed words; title weighted over snippet and body), with a
    trigram index on titles so misspelled names (OCR, ASR) still find their page; candidates are reranked
    by how much of each title the query covers and how close the query is to it."""

    name: ClassVar[str] = "local"
    WEIGHTS = (10.0, 3.0, 1.0)  # bm25 column weights: title, snippet, body
    CANDIDATES = 50

    def __init__(self, pages: PageStore) -> None:
        self.pages = pages
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            self._db.execute(
                "CREATE VIRTUAL TABLE docs USING fts5(title, snippet, body, "
                "tokenize='porter unicode61 remove_diacritics 2')"
            )
            self._db.execute("CREATE VIRTUAL TABLE titles USING fts5(title, tokenize='trigram')")
        except sqlite3.OperationalError as e:
            raise ToolError(
                f"SQLite {sqlite3.sqlite_version} lacks FTS5 with the trigram tokenizer "
                f"(needs 3.34+ built with FTS5): {e}"
            ) from e
        rows = [(i, p.title, p.snippet, p.text) for i, p in enumerate(pages.pages)]
        self._db.executemany("INSERT INTO docs(rowid, title, snippet, body) VALUES (?, ?, ?, ?)", rows)
        self._db.executemany(
            "INSERT INTO titles(rowid, title) VALUES (?, ?)", [(i, t) for i, t, _, _ in rows]
        )
        self._db.commit()

    def search(self, query: str, k: int) -> list[SearchHit]:
        terms = _terms(query)
        if not terms:
            raise ToolError("the query has no words to search for")
        try:
            hits, fuzzy = self._candidates(terms)
        except sqlite3.Error as e:
            raise ToolError(f"the search index failed on {query!r}: {e}") from e
        bm25 = {row: -score for row, score, _ in hits}
        excerpt = {row: text for row, _, text in hits}
        top = max(bm25.values(), default=0.0) or 1.0
        qset, qnorm = set(terms), " ".join(terms)
        scored = []
        for row in dict.fromkeys([r for r, _, _ in hits] + [r for (r,) in fuzzy]):
            page = self.pages.pages[row]
            title_terms = _terms(page.title)
            cover = sum(t in qset for t in title_terms) / max(len(title_terms), 1)
            close = difflib.SequenceMatcher(None, qnorm, " ".join(title_terms)).ratio()
            score = 0.5 * bm25.get(row, 0.0) / top + 0.3 * cover + 0.2 * close
            scored.append((-score, page.url, row))
        scored.sort()
        out = []
        for rank, (neg, url, row) in enumerate(scored[:k], 1):
            page = self.pages.pages[row]
            snippet = " ".join((excerpt.get(row) or page.snippet or page.text[:200]).split())
            out.append(SearchHit(rank=rank, url=url, title=page.title, snippet=snippet, score=round(-neg, 4)))
        return out

    def _candidates(self, terms: list[str]) -> tuple[list[Any], list[Any]]:
        """(BM25 word hits as (row, bm25, excerpt), trigram title hits as (row,)) for the query terms."""
        words = " OR ".join(f'"{t}"' for t in dict.fromkeys(terms))
        grams = sorted({t[i : i + 3] for t in terms if len(t) >= 3 for i in range(len(t) - 2)})
        w = self.WEIGHTS
        with self._lock:
            hits = self._db.execute(
                f"SELECT rowid, bm25(docs, {w[0]}, {w[1]}, {w[2]}), snippet(docs, 2, '', '', '…', 24) "
                "FROM docs WHERE docs MATCH ? ORDER BY 2 LIMIT ?",
                (words, self.CANDIDATES),
            ).fetchall()
            fuzzy = []
            if grams:
                fuzzy = self._db.execute(
                    "SELECT rowid FROM titles WHERE titles MATCH ? ORDER BY rank LIMIT ?",
                    (" OR ".join(f'"{g}"' for g in grams), self.CANDIDATES // 2),
                ).fetchall()
        return hits, fuzzy


class BraveSearchBackend(SearchBackend):
    """The Brave Search web API (``GET /res/v1/web/search?q=&count=``, key in ``X-Subscription-Token``).
    The key is read from the environment variable named ``api_key_env`` at each call."""

    name: ClassVar[str] = "brave"

    def __init__(
        self,
        api_key_env: str,
        endpoint: str = BRAVE_ENDPOINT,
        timeout_s: float = 10.0,
        max_bytes: int = 5_000_000,
    ) -> None:
        self.api_key_env, self.endpoint, self.timeout_s, self.max_bytes = (
            api_key_env,
            endpoint,
            timeout_s,
            max_bytes,
        )

    def search(self, query: str, k: int) -> list[SearchHit]:
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise ToolError(f"the Brave search backend needs an API key in ${self.api_key_env}")
        url = f"{self.endpoint}?{urllib.parse.urlencode({'q': query, 'count': min(k, MAX_K)})}"
        request = urllib.request.Request(
            url,
            headers={
                "Accept": "application/json",
                "X-Subscription-Token": key,
                "User-Agent": "orchestra-web-search/0.1",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                body = resp.read(self.max_bytes + 1)
        except urllib.error.HTTPError as e:
            detail = e.read(300).decode("utf-8", "replace")
            raise ToolError(f"the search API answered HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise ToolError(f"the search API is unreachable: {getattr(e, 'reason', e)}") from e
        if len(body) > self.max_bytes:
            raise ToolError(f"the search API answer exceeds {self.max_bytes} bytes")
        try:
            results = json.loads(body).get("web", {}).get("results", [])
            hits = [
                SearchHit(
                    rank=i,
                    url=str(r["url"]),
                    title=_TAG.sub("", str(r.get("title", ""))),
                    snippet=_TAG.sub("", str(r.get("description", ""))),
                    score=1.0 / i,
                )
                for i, r in enumerate(results[:k], 1)
            ]
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError) as e:
            raise ToolError(f"the search API answer is not the expected JSON: {e}") from e
        return hits


class WebSearch(Tool):
    """Ranked web search; by default over the world's pages."""

    name: ClassVar[str] = "web_search"
    description: ClassVar[str] = (
        "Search the web for a query (names, keywords or a question) and get the best-matching pages: rank, "
        "title, URL and a snippet around the match. Open a result with page_browser to read it."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to search for"},
            "k": {
                "type": "integer",
                "description": f"number of results (1-{MAX_K}, default 5)",
                "minimum": 1,
                "maximum": MAX_K,
            },
        },
        "required": ["query"],
    }

    def __init__(
        self, pages: PageStore | None = None, backend: SearchBackend | None = None, default_k: int = 5
    ) -> None:
        if backend is None:
            if pages is None:
                raise ToolError("web_search needs a page store or a search backend")
            backend = LocalSearchBackend(pages)
        self.pages, self.backend, self.default_k = pages, backend, default_k

    @classmethod
    def from_world(cls, world_dir: Path, default_k: int = 5) -> WebSearch:
        """Local search over a generated world's kb/pages.jsonl (nothing else in the world is read)."""
        return cls(pages=PageStore.from_world(world_dir), default_k=default_k)

    def run(self, query: str, k: int | None = None) -> Observation:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string")
        k = self.default_k if k is None else int(k)
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}, got {k}")
        if isinstance(self.backend, LocalSearchBackend) and not len(self.backend.pages):
            raise ToolError(f"no pages are indexed: {self.backend.pages.source}")
        hits = self.backend.search(query, k)
        data = {"query": query, "backend": self.backend.name, "results": [h.model_dump() for h in hits]}
        if not hits:
            return Observation(tool=self.name, text=f"No results for {query!r}.", data=data)
        lines = [f"{h.rank}. {h.title} — {h.url}\n   {h.snippet}" for h in hits]
        return Observation(tool=self.name, text=f"Results for {query!r}:\n" + "\n".join(lines), data=data)
