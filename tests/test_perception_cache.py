"""The perception cache on real world media: keys by content and version, warm equals cold, the store's
failure modes, threads and processes, and the registry wrapper."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from orchestra.config import ToolParams
from orchestra.errors import OrchestraError, ToolError
from orchestra.tools.audio import AudioDTMF, AudioTones
from orchestra.tools.base import Observation, Tool
from orchestra.tools.cache import (
    CachedTool,
    CacheError,
    CacheKey,
    CacheStats,
    PerceptionCache,
    cache_key,
    open_perception_cache,
)
from orchestra.tools.image import ImageCountObjects, ImageOCR
from orchestra.tools.loader import load_tool_class
from orchestra.tools.registry import (
    PERCEPTION_TOOLS,
    WRITES_FILES,
    cacheable_tools,
    cached_registry,
    default_registry,
)
from orchestra.world import image as wimage

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def cache(tmp_path: Path) -> Iterator[PerceptionCache]:
    with PerceptionCache.open(tmp_path / "cache" / "perception.sqlite") as c:
        yield c


def _sign(path: Path, text: str, seed: int = 3) -> Path:
    img, _ = wimage.render_sign(np.random.default_rng(seed), text, 0.2)
    wimage.save_png(img, path)
    return path


def _wavs(world: Path) -> list[Path]:
    return sorted((world / "media" / "audios").glob("*.wav"))


class _Bytes(Tool):
    """A media tool that counts its runs and closes: what the wrapper does around a tool."""

    name: ClassVar[str] = "byte_count"
    description: ClassVar[str] = "count a file's bytes"
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "k": {"type": "integer"}},
        "required": ["path"],
    }
    version: ClassVar[str] = "1"

    def __init__(self) -> None:
        self.runs = 0
        self.closed = False

    def run(self, path: str, k: int = 1) -> Observation:
        self.runs += 1
        n = len(Path(path).read_bytes())
        return Observation(tool=self.name, text=f"{n * k} bytes", data={"n": n, "k": k}, cost=0.25)

    def close(self) -> None:
        self.closed = True


def test_same_bytes_under_another_path_hit_and_keep_the_measured_latency(
    tmp_path: Path, cache: PerceptionCache
) -> None:
    a = _sign(tmp_path / "a.png", "KEZAR")
    b = tmp_path / "elsewhere" / "b.png"
    b.parent.mkdir()
    shutil.copy(a, b)
    ocr = CachedTool.wrap(ImageOCR(), cache)
    cold = ocr(path=str(a))
    warm = ocr(path=str(b))
    assert cold.ok and "KEZAR" in cold.text
    assert warm == cold  # text, data, ok, error, latency_s and cost: accounting is the same warm or cold
    assert warm is not cold and warm.latency_s == cold.latency_s > 0
    assert cache.stats == CacheStats(hits=1, misses=1, stores=1)
    plain = ImageOCR()(path=str(b))
    assert (plain.text, plain.data, plain.ok) == (cold.text, cold.data, cold.ok)


def test_changed_bytes_other_arguments_and_another_tool_miss(tmp_path: Path, cache: PerceptionCache) -> None:
    path = _sign(tmp_path / "sign.png", "4817")
    ocr = CachedTool.wrap(ImageOCR(), cache)
    first = ocr(path=str(path))
    _sign(path, "TISMAN", seed=4)  # same path, new bytes
    second = ocr(path=str(path))
    assert "4817" in first.text and "TISMAN" in second.text
    ocr(path=str(path), mode="fast")
    CachedTool.wrap(ImageCountObjects(), cache)(path=str(path))
    assert cache.stats == CacheStats(hits=0, misses=4, stores=4) and len(cache) == 4


def test_another_tool_version_misses(tmp_path: Path, cache: PerceptionCache) -> None:
    class NextOCR(ImageOCR):
        version: ClassVar[str] = "next"

    path = _sign(tmp_path / "sign.png", "KEZAR")
    CachedTool.wrap(ImageOCR(), cache)(path=str(path))
    CachedTool.wrap(NextOCR(), cache)(path=str(path))
    CachedTool.wrap(NextOCR(), cache)(path=str(path))
    assert cache.stats == CacheStats(hits=1, misses=2, stores=2)
    a, b = cache_key(ImageOCR(), {"path": str(path)}), cache_key(NextOCR(), {"path": str(path)})
    assert a is not None and b is not None and (a.tool, a.args) == (b.tool, b.args) and a.version != b.version


def test_default_version_hashes_the_source_of_the_tool_modules() -> None:
    class Edited(ImageOCR):  # defined in this module: its source is part of the version
        pass

    assert len(ImageOCR.version) == 16 and int(ImageOCR.version, 16) >= 0
    assert ImageOCR().version == ImageOCR.version == ImageCountObjects.version  # one module, one version
    assert AudioDTMF.version == AudioTones.version != ImageOCR.version
    assert Edited.version not in (ImageOCR.version, AudioDTMF.version)
    code = "from orchestra.tools.image import ImageOCR; print(ImageOCR.version)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ImageOCR.version  # stable across processes


def test_the_key_is_canonical_json_with_the_media_digest(tmp_path: Path) -> None:
    path = _sign(tmp_path / "sign.png", "KEZAR")
    a = cache_key(ImageOCR(), {"path": str(path), "mode": "fast", "psm": np.int64(6)})
    b = cache_key(ImageOCR(), {"psm": 6, "mode": "fast", "path": str(path)})
    assert a == b and a is not None
    assert json.loads(a.args) == {"path": a.media, "mode": "fast", "psm": 6} and str(tmp_path) not in a.args
    assert cache_key(ImageOCR(), {"path": str(tmp_path / "missing.png")}) is None


def test_failures_and_unreadable_files_are_not_cached(tmp_path: Path, cache: PerceptionCache) -> None:
    good = _sign(tmp_path / "sign.png", "KEZAR")
    broken = tmp_path / "broken.png"
    broken.write_bytes(good.read_bytes()[:300])  # a truncated PNG: the tool fails (deterministically)
    ocr = CachedTool.wrap(ImageOCR(), cache)
    first, second = ocr(path=str(broken)), ocr(path=str(broken))
    assert not first.ok and not second.ok and first.error == second.error
    assert cache.stats == CacheStats(hits=0, misses=2, stores=0) and len(cache) == 0
    missing = ocr(path=str(tmp_path / "missing.png"))
    assert missing == ImageOCR()(path=str(tmp_path / "missing.png")).model_copy(
        update={"latency_s": missing.latency_s}
    )
    assert cache.stats.misses == 2  # a file that cannot be read is no lookup at all


def test_entries_persist_across_opens(tmp_path: Path, small_world: Path) -> None:
    db = tmp_path / "perception.sqlite"
    wav = _wavs(small_world)[0]
    with PerceptionCache.open(db) as c:
        cold = CachedTool.wrap(AudioDTMF(), c)(path=str(wav))
    with PerceptionCache.open(db) as c:
        warm = CachedTool.wrap(AudioDTMF(), c)(path=str(wav))
        assert c.stats == CacheStats(hits=1, misses=0, stores=0)
    assert warm == cold
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_corrupt_or_foreign_database_is_a_cache_error(tmp_path: Path) -> None:
    """The documented choice: a bad file is reported (CacheError), never silently rebuilt."""
    good = tmp_path / "good.sqlite"
    with PerceptionCache.open(good) as c:
        for i in range(200):
            c.put(CacheKey("t", str(i), "v", "m"), Observation(tool="t", text="x" * 2000))
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"these bytes are no database " * 64)
    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE runs (id INTEGER)").connection.close()
    for bad in (truncated, garbage, foreign):
        with pytest.raises(CacheError, match=r"delete it") as info:
            PerceptionCache.open(bad)
        assert isinstance(info.value, OrchestraError) and str(bad) in str(info.value)
    assert sqlite3.connect(foreign).execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # untouched


def test_a_closed_cache_refuses_use(tmp_path: Path) -> None:
    c = PerceptionCache.open(tmp_path / "c.sqlite")
    c.close()
    c.close()  # idempotent
    with pytest.raises(CacheError, match="closed"):
        c.get(CacheKey("t", "{}", "v", "m"))


def test_threads_share_one_cache(tmp_path: Path, small_world: Path, cache: PerceptionCache) -> None:
    wavs = _wavs(small_world)[:3]
    tools = [CachedTool.wrap(AudioTones(), cache), CachedTool.wrap(AudioTones(), cache)]
    calls = [(tools[i % 2], wavs[i % 3]) for i in range(48)]

    def call(job: tuple[Tool, Path]) -> tuple[Path, Observation]:
        return job[1], job[0](path=str(job[1]))

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(call, calls))
    by_file: dict[Path, list[Observation]] = {}
    for wav, obs in results:
        by_file.setdefault(wav, []).append(obs)
    for group in by_file.values():  # racing misses of one key all return the stored observation
        assert all(obs == group[0] and obs.ok for obs in group)
    stats = cache.stats
    assert stats.hits + stats.misses == len(calls) and stats.stores == 3 and len(cache) == 3


_WRITER = """
import sys
from orchestra.tools.base import Observation
from orchestra.tools.cache import CacheKey, PerceptionCache
me = sys.argv[2]
with PerceptionCache.open(sys.argv[1], timeout_s=60) as c:
    for i in range(40):
        key = CacheKey("t", f"{me}-{i}" if i % 2 else f"shared-{i}", "v", "m")
        stored = c.put(key, Observation(tool="t", text=f"{me} {i}", latency_s=float(i)))
        assert c.get(key) == stored
"""


def test_processes_share_one_file(tmp_path: Path) -> None:
    db = tmp_path / "shared.sqlite"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(db), str(n)], cwd=ROOT, stderr=subprocess.PIPE)
        for n in range(3)
    ]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    with PerceptionCache.open(db) as c:
        assert len(c) == 3 * 20 + 20


def test_the_wrapper_keeps_name_spec_validation_and_close(tmp_path: Path, cache: PerceptionCache) -> None:
    inner = _Bytes()
    tool = CachedTool.wrap(inner, cache)
    assert (tool.name, tool.description, tool.input_schema, tool.spec()) == (
        inner.name,
        inner.description,
        inner.input_schema,
        inner.spec(),
    )
    assert (tool.version, tool.cost_per_call, tool.failure_kinds) == ("1", 0.0, ())
    media = tmp_path / "m.bin"
    media.write_bytes(b"12345")
    for bad in ({"path": str(media), "colour": "red"}, {"k": 2}, {"path": str(media), "k": "two"}):
        got, want = tool(**bad), inner(**bad)
        assert not got.ok and (got.text, got.error, got.data) == (want.text, want.error, want.data)
        with pytest.raises(ToolError):
            tool.check_args(bad)
    assert cache.stats == CacheStats() and inner.runs == 0
    assert tool(path=str(media), k=2).text == tool(path=str(media), k=2).text == "10 bytes"
    assert inner.runs == 1 and tool(path=str(media), k=2).cost == 0.25
    tool.close()
    assert inner.closed
    with pytest.raises(ToolError, match="already"):
        CachedTool.wrap(tool, cache)


def test_cached_registry_wraps_only_the_cacheable_perception_tools(
    small_world: Path, cache: PerceptionCache
) -> None:
    plain = default_registry(small_world)
    with cached_registry(plain, cache) as tools:
        assert tools.names() == plain.names()
        for name in tools.names():
            assert tools.get(name).spec() == plain.get(name).spec()
            wrapped = isinstance(tools.get(name), CachedTool)
            assert wrapped == (name in cacheable_tools())
            assert wrapped or tools.get(name) is plain.get(name)
        assert not set(cacheable_tools()) & WRITES_FILES and "web_search" not in cacheable_tools()
        wav = str(_wavs(small_world)[0])
        got, want = tools.get("audio_dtmf")(path=wav, speed=2), plain.get("audio_dtmf")(path=wav, speed=2)
        assert (
            not got.ok and (got.text, got.error) == (want.text, want.error) and "unknown argument" in got.text
        )
        assert tools.get("audio_dtmf")(path=wav) == tools.get("audio_dtmf")(path=wav)
        assert cache.stats == CacheStats(hits=1, misses=1, stores=1)
    with cached_registry(default_registry(), cache) as once, pytest.raises(ToolError, match="already"):
        cached_registry(once, cache)


def test_file_writing_perception_tools_are_exactly_those_with_an_output_argument() -> None:
    writers = {
        cls.name
        for cls in map(load_tool_class, PERCEPTION_TOOLS)
        if {"out_path", "out_dir"} & set(cls.input_schema["properties"])
    }
    assert writers == WRITES_FILES
    assert len(cacheable_tools()) == len(PERCEPTION_TOOLS) - len(WRITES_FILES)


def test_default_registry_takes_a_cache_and_params_configure_it(tmp_path: Path, small_world: Path) -> None:
    params = ToolParams()
    assert params.cache is True and params.cache_path == "cache/perception.sqlite"
    assert open_perception_cache(tmp_path, ToolParams(cache=False)) is None
    with open_perception_cache(tmp_path / "data", params) as c:
        assert c.path == tmp_path / "data" / "cache" / "perception.sqlite" and c.path.is_file()
        with default_registry(small_world, params, cache=c) as tools:
            assert isinstance(tools.get("image_ocr"), CachedTool)
            assert not isinstance(tools.get("image_crop"), CachedTool)
    with default_registry(small_world, params) as cold:
        assert not any(isinstance(t, CachedTool) for t in cold)  # no cache given: everything runs cold
    from orchestra.config import load_params

    assert load_params(ROOT / "params.yaml").tools.cache is True
