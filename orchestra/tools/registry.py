"""The default tool registry: the perception tools (imported by module:Class name), the action tools, and
which perception tools the perception cache may serve."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestra.config import ToolParams
from orchestra.errors import ToolError
from orchestra.tools.base import Tool, ToolRegistry
from orchestra.tools.loader import load_tool_class
from orchestra.tools.pages import PAGES_FILE, PageStore

if TYPE_CHECKING:
    from orchestra.tools.cache import PerceptionCache

# Perception tools take no configuration; a missing module or class is an error, never a silent skip.
PERCEPTION_TOOLS: tuple[str, ...] = (
    "orchestra.tools.image:ImageOCR",
    "orchestra.tools.image:ImageCountObjects",
    "orchestra.tools.image:ImageReadChart",
    "orchestra.tools.image:ImageDescribe",
    "orchestra.tools.image:ImageCrop",
    "orchestra.tools.audio:AudioDTMF",
    "orchestra.tools.audio:AudioTones",
    "orchestra.tools.audio:AudioMorse",
    "orchestra.tools.audio:AudioSegment",
    "orchestra.tools.speech:AudioSpeech",
    "orchestra.tools.video:VideoSampleFrames",
    "orchestra.tools.video:VideoEvents",
    "orchestra.tools.video:VideoText",
    "orchestra.tools.video:VideoExtractAudio",
)
#: perception tools that write a file (a crop, a segment, frames, an audio track) and name it in their
#: observation: never cached, since a hit would name a file it did not write
WRITES_FILES: frozenset[str] = frozenset(
    {"image_crop", "audio_segment", "video_sample_frames", "video_extract_audio"}
)
ACTION_TOOLS: tuple[str, ...] = (
    "orchestra.tools.search:WebSearch",
    "orchestra.tools.browse:PageBrowser",
    "orchestra.tools.sandbox:CodeExecutor",
)


def tool_classes() -> list[type[Tool]]:
    """Every default tool's class, perception first (no tool is built, no world is read)."""
    return [load_tool_class(spec) for spec in PERCEPTION_TOOLS + ACTION_TOOLS]


def cacheable_tools() -> list[str]:
    """Names of the tools the perception cache serves: the perception tools that write no file (they
    read one media file and are deterministic on its bytes)."""
    return sorted(cls.name for cls in map(load_tool_class, PERCEPTION_TOOLS) if cls.name not in WRITES_FILES)


def cached_registry(registry: ToolRegistry, cache: PerceptionCache) -> ToolRegistry:
    """``registry``'s tools with :func:`cacheable_tools` served from ``cache`` (the others unchanged); the
    new registry takes over the tools, so close it rather than ``registry``; ``cache`` stays open."""
    from orchestra.tools.cache import with_cache

    return with_cache(registry, cache, [n for n in cacheable_tools() if n in registry])


def page_store(world_dir: Path | None) -> PageStore:
    """The world's pages; with no world, an empty store whose reason every page tool reports."""
    if world_dir is None:
        return PageStore.empty("no world directory was given, so there are no pages to search or read")
    if not has_pages(Path(world_dir)):
        return PageStore.empty(
            f"{world_dir} has no knowledge base ({PAGES_FILE}): there are no pages to read"
        )
    return PageStore.from_world(Path(world_dir))


def action_tools(pages: PageStore, params: ToolParams) -> list[Tool]:
    """web_search, page_browser and code_executor, configured from ``params``."""
    from orchestra.tools.browse import PageBrowser
    from orchestra.tools.sandbox import CodeExecutor
    from orchestra.tools.search import BraveSearchBackend, WebSearch

    s, b, x = params.search, params.browser, params.sandbox
    backend = (
        BraveSearchBackend(api_key_env=s.api_key_env, endpoint=s.endpoint, timeout_s=s.timeout_s)
        if s.backend == "brave"
        else None
    )
    return [
        WebSearch(pages=pages, backend=backend, default_k=s.default_k),
        PageBrowser(
            pages,
            allow_http=b.allow_http,
            allow_hosts=tuple(b.allow_hosts),
            max_bytes=b.max_bytes,
            timeout_s=b.timeout_s,
            max_chars=b.max_chars,
        ),
        CodeExecutor(
            cpu_s=x.cpu_s,
            mem_mb=x.mem_mb,
            wall_s=x.wall_s,
            max_output=x.max_output,
            max_procs=x.max_procs,
            disk_mb=x.disk_mb,
            pool_size=x.pool_size,
            uid=x.uid,
            gid=x.gid,
            namespaces=x.namespaces,
            require_landlock=x.require_landlock,
        ),
    ]


def openai_speech(params: ToolParams) -> Tool:
    """audio_speech on the OpenAI-compatible transcription endpoint ``params.speech`` names."""
    from orchestra.tools.speech_openai import OpenAISpeech

    sp = params.speech
    if sp.base_url is None or sp.model is None:
        raise ToolError("tools.speech.backend 'openai' needs base_url and model")
    return OpenAISpeech(sp.base_url, sp.model, sp.api_key_env, sp.timeout_s)


def default_registry(
    world_dir: Path | None = None, params: ToolParams | None = None, cache: PerceptionCache | None = None
) -> ToolRegistry:
    """All default tools. ``world_dir`` is a generated world (or seed_tasks output) holding kb/pages.jsonl;
    tools never read anything else from it. With ``cache`` (see
    :func:`orchestra.tools.cache.open_perception_cache`) the cacheable perception tools are served from
    it; without one every tool runs cold."""
    return registry_for_pages(page_store(world_dir), params or ToolParams(), cache)


def registry_for_pages(
    pages: PageStore, params: ToolParams, cache: PerceptionCache | None = None
) -> ToolRegistry:
    """All default tools over an already loaded page store (``cache``: as for :func:`default_registry`);
    the perception tools run in ``params.workers`` worker processes (:mod:`orchestra.tools.pool`)."""
    from orchestra.tools.pool import PooledTool, worker_count

    workers = worker_count(params.workers)
    registry = ToolRegistry()
    for spec in PERCEPTION_TOOLS:
        cls = load_tool_class(spec)
        if cls.name == "audio_speech" and params.speech.backend == "openai":
            registry.register(openai_speech(params))  # a network client: runs in the calling thread
            continue
        try:
            tool = cls(names=speech_names(pages)) if cls.name == "audio_speech" else cls()
        except TypeError as e:
            raise ToolError(f"tool {spec} cannot be built without arguments: {e}") from e
        registry.register(PooledTool.wrap(tool, workers) if workers else tool)
    for tool in action_tools(pages, params):
        registry.register(tool)
    return registry if cache is None else cached_registry(registry, cache)


def speech_names(pages: PageStore) -> list[str]:
    """The names the speech tool may hear: the page titles search serves (up to three words each)."""
    return sorted({p.title for p in pages.pages if 0 < len(p.title.split()) <= 3})


def has_pages(world_dir: Path) -> bool:
    return (Path(world_dir) / PAGES_FILE).is_file()
