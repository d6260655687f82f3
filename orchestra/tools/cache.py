"""The perception cache: observations of deterministic media tools in SQLite, keyed by the media's content.

A key is (tool name, canonical JSON of the checked arguments with ``path`` replaced by the SHA-256
of the file's bytes, tool version — see ``Tool.version``): the same bytes under another path hit,
changed bytes or changed tool code miss. A value is the whole :class:`Observation` as JSON, so a
hit carries the latency and cost measured when it was computed, and accounting is the same warm
or cold. The file is one SQLite database in WAL mode (several processes may share it; writers
wait up to ``timeout_s`` for each other); one connection per cache, behind a lock, serves every
thread. An unreadable, corrupt or foreign database file raises :class:`CacheError` when opened (a
``quick_check`` runs then) or used: it is not rebuilt behind the caller's back; delete the file to
start afresh.

Only ``ok`` observations are stored. A failure is never cached: its text names the path it was
given (a hit under another path would name the wrong file), an OSError may be transient, and
a corrupt file fails fast anyway. A bad argument, a missing file, or arguments that are not JSON
bypass the cache: the tool runs and reports them exactly as it does uncached.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestra.errors import OrchestraError, ToolError
from orchestra.tools.base import Observation, Tool, ToolRegistry, ToolWrapper, stand_in

if TYPE_CHECKING:
    from orchestra.config import ToolParams

#: the argument every perception tool names its media file by
MEDIA_ARG = "path"
#: bumped when the table layout changes (``PRAGMA user_version``)
SCHEMA_VERSION = 1
_TABLE = "observations"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_TABLE} (
    tool TEXT NOT NULL,
    args TEXT NOT NULL,
    version TEXT NOT NULL,
    media TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (tool, args, version)
) WITHOUT ROWID
"""


_SELECT = f"SELECT value FROM {_TABLE} WHERE tool = ? AND args = ? AND version = ?"


class CacheError(OrchestraError):
    """The perception cache's database cannot be opened, read or written (corrupt, foreign, closed)."""


@dataclass(frozen=True)
class CacheKey:
    """Where one observation lives: tool, canonical arguments (path -> media SHA-256), tool version."""

    tool: str
    args: str
    version: str
    media: str


@dataclass(frozen=True)
class CacheStats:
    """Lookups and writes of one :class:`PerceptionCache` object since it was opened."""

    hits: int = 0
    misses: int = 0
    stores: int = 0


def media_sha256(path: str | Path) -> str | None:
    """The SHA-256 (hex) of a regular file's bytes; None when it is missing or unreadable (the tool says)."""
    p = Path(str(path)).expanduser()
    try:
        if not p.is_file():
            return None
        with p.open("rb") as fh:
            return hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError:
        return None


def _plain(value: Any) -> Any:
    """JSON for the numpy scalars ``check_args`` accepts as integers and numbers."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def cache_key(tool: Tool, args: Mapping[str, Any]) -> CacheKey | None:
    """The key of ``tool`` on checked ``args``; None when the media file cannot be read or an argument is
    not JSON (such a call is not cached)."""
    digest = media_sha256(args[MEDIA_ARG]) if isinstance(args.get(MEDIA_ARG), str) else None
    if digest is None:
        return None
    try:
        text = json.dumps(
            {**args, MEDIA_ARG: digest},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=_plain,
        )
    except (TypeError, ValueError):
        return None
    return CacheKey(tool.name, text, tool.version, digest)


class PerceptionCache:
    """Observations on disk by :class:`CacheKey` (see the module docstring). Thread-safe; closing is
    idempotent; ``with PerceptionCache.open(path) as cache:`` closes it on the way out."""

    def __init__(self, path: str | Path, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._hits = self._misses = self._stores = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db: sqlite3.Connection | None = sqlite3.connect(
                self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as e:
            raise CacheError(f"perception cache {self.path}: cannot open: {e}") from e
        try:
            self._prepare(self._db)
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def open(cls, path: str | Path, timeout_s: float = 30.0) -> PerceptionCache:
        """Open (creating it and its folder if needed) the cache file at ``path``."""
        return cls(path, timeout_s)

    def _prepare(self, db: sqlite3.Connection) -> None:
        try:
            problems = [row[0] for row in db.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise CacheError(self._broken("; ".join(map(str, problems[:3]))))
            db.execute("BEGIN IMMEDIATE")
            try:
                tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if not tables and version == 0:
                    db.execute(_SCHEMA)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                elif tables != {_TABLE} or version != SCHEMA_VERSION:
                    raise CacheError(
                        f"perception cache {self.path}: not a perception cache of schema {SCHEMA_VERSION} "
                        f"(tables {sorted(tables)}, schema {version}); delete it or choose another cache_path"
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("PRAGMA journal_mode=WAL")  # only once the file is known to be ours
            db.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as e:
            raise CacheError(self._broken(str(e))) from e

    def _broken(self, why: str) -> str:
        return f"perception cache {self.path} is unreadable or corrupt ({why}); delete it to start afresh"

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise CacheError(f"perception cache {self.path} is closed")
        return self._db

    def get(self, key: CacheKey) -> Observation | None:
        """The stored observation (a fresh copy), or None; counted as a hit or a miss."""
        with self._lock:
            try:
                row = self._conn().execute(_SELECT, (key.tool, key.args, key.version)).fetchone()
            except sqlite3.Error as e:
                raise CacheError(self._broken(str(e))) from e
            if row is None:
                self._misses += 1
                return None
            self._hits += 1
        return self._decode(row[0])

    def put(self, key: CacheKey, obs: Observation) -> Observation:
        """Store ``obs`` unless the key is stored already (another thread or process won the race), and
        return the stored observation, so every caller of one key sees the same one."""
        try:
            value = json.dumps(obs.model_dump(), ensure_ascii=False, allow_nan=True)
        except (TypeError, ValueError) as e:
            raise CacheError(f"an observation of {obs.tool} is not JSON, so it cannot be cached: {e}") from e
        with self._lock:
            try:
                db = self._conn()
                cur = db.execute(
                    f"INSERT INTO {_TABLE} (tool, args, version, media, value) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING",
                    (key.tool, key.args, key.version, key.media, value),
                )
                if cur.rowcount:
                    self._stores += 1
                else:
                    value = db.execute(_SELECT, (key.tool, key.args, key.version)).fetchone()[0]
            except sqlite3.Error as e:
                raise CacheError(self._broken(str(e))) from e
        return self._decode(value)

    def _decode(self, value: str) -> Observation:
        try:
            return Observation.model_validate(json.loads(value))
        except (ValueError, ValidationError) as e:
            raise CacheError(self._broken(f"an entry is not an observation: {e}")) from e

    @property
    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(hits=self._hits, misses=self._misses, stores=self._stores)

    def __len__(self) -> int:
        with self._lock:
            try:
                return int(self._conn().execute(f"SELECT count(*) FROM {_TABLE}").fetchone()[0])
            except sqlite3.Error as e:
                raise CacheError(self._broken(str(e))) from e

    def close(self) -> None:
        with self._lock:
            db, self._db = self._db, None
        if db is not None:
            try:
                db.close()
            except sqlite3.Error as e:
                raise CacheError(f"perception cache {self.path}: cannot close: {e}") from e

    def __enter__(self) -> PerceptionCache:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class CachedTool(ToolWrapper):
    """A tool whose observations come from a :class:`PerceptionCache` when its media was seen before.

    It has the wrapped tool's name, description, input schema, price, failure kinds and version;
    argument checking, ``spec`` and ``close`` are the wrapped tool's. Build one with :meth:`wrap`."""

    def __init__(self, inner: Tool, cache: PerceptionCache) -> None:
        super().__init__(inner)
        self.cache = cache

    @staticmethod
    def wrap(tool: Tool, cache: PerceptionCache) -> CachedTool:
        """``tool`` served from ``cache``; a ToolError if it takes no ``path`` (it reads no media file) or
        is served from a cache already."""
        if isinstance(tool, CachedTool):
            raise ToolError(f"tool {tool.name!r} is served from a perception cache already")
        if MEDIA_ARG not in tool.input_schema.get("properties", {}):
            raise ToolError(f"tool {tool.name!r} takes no {MEDIA_ARG!r} argument, so it cannot be cached")
        return stand_in(CachedTool, type(tool))(tool, cache)

    def __call__(self, **kwargs: Any) -> Observation:
        try:
            args = self.inner.check_args(kwargs)
        except (OrchestraError, *self.inner.failure_kinds):
            return self.inner(**kwargs)  # the uncached tool reports the bad argument exactly as ever
        key = cache_key(self.inner, args)
        if key is None:
            return self.inner(**kwargs)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        obs = self.inner(**kwargs)
        if not obs.ok or media_sha256(args[MEDIA_ARG]) != key.media:  # a failure, or the file changed
            return obs
        return self.cache.put(key, obs)


def with_cache(registry: ToolRegistry, cache: PerceptionCache, names: Iterable[str]) -> ToolRegistry:
    """A registry of the same tools, those named in ``names`` served from ``cache``; it takes over the
    tools (close it, not ``registry``). An unknown name is a ToolError listing the valid ones."""
    wanted = set(names)
    for name in sorted(wanted):
        registry.get(name)
    return ToolRegistry(CachedTool.wrap(t, cache) if t.name in wanted else t for t in registry)


def open_perception_cache(data_dir: str | Path, params: ToolParams) -> PerceptionCache | None:
    """The cache ``params`` configure (``cache_path`` under ``data_dir``), or None when ``cache`` is off."""
    if not params.cache:
        return None
    return PerceptionCache.open(Path(data_dir) / params.cache_path)
