"""The tool seam: Observation, the Tool base (one abstract method, `run`) and the ToolRegistry."""

from __future__ import annotations

import functools
import hashlib
import inspect
import numbers
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from types import ModuleType, TracebackType
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from orchestra.errors import OrchestraError, ToolError


class Observation(BaseModel):
    """What a tool hands back: text the agent reads, structured data, and accounting."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    ok: bool = True
    text: str = Field(description="what the agent reads")
    data: dict[str, Any] = Field(default_factory=dict, description="structured result")
    error: str | None = None
    latency_s: float = 0.0
    cost: float = 0.0


#: exception types a tool's ``run`` may raise on bad input (besides the OrchestraError hierarchy)
FailureKinds = tuple[type[Exception], ...]

#: the two variants of every perception tool: a cheap algorithm and a careful one (experts pick one)
MODES: tuple[str, ...] = ("fast", "careful")


def mode_property(description: str) -> dict[str, Any]:
    """The ``mode`` entry of a perception tool's input schema (absent: careful)."""
    return {"mode": {"type": "string", "enum": list(MODES), "description": description}}


def check_mode(mode: str) -> str:
    """``mode`` if it is a variant, else a ToolError naming the valid ones (a failed observation)."""
    if mode not in MODES:
        raise ToolError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    return mode


def ramp(x: float, lo: float, hi: float) -> float:
    """0 at or below ``lo``, 1 at or above ``hi``, linear between: a fixed monotone confidence map."""
    return float(min(1.0, max(0.0, (x - lo) / (hi - lo))))


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (numbers.Integral,),  # numbers.*: numpy scalars count too
    "number": (numbers.Real,),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}


def _type_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``value`` does not have the JSON type ``schema`` declares (items of arrays too), or None."""
    kind = schema.get("type")
    if not isinstance(kind, str) or kind not in _JSON_TYPES:
        return None
    ok = isinstance(value, _JSON_TYPES[kind]) and (kind == "boolean" or not isinstance(value, bool))
    if not ok and kind == "integer" and isinstance(value, numbers.Real) and not isinstance(value, bool):
        ok = float(value).is_integer()  # 5.0 is the integer 5
    if not ok:
        article = "an" if kind[0] in "aeiou" else "a"
        return f"must be {article} {kind}, got {type(value).__name__} {value!r:.60}"
    items = schema.get("items")
    if kind == "array" and isinstance(items, Mapping):
        for i, item in enumerate(value):
            problem = _type_problem(item, items)
            if problem:
                return f"item {i} {problem}"
    return None


def _version_modules(cls: type) -> list[ModuleType]:
    """The modules a tool class is built from: those of its classes and, transitively, the orchestra
    modules whose functions, classes and (non-package) modules they import."""
    todo = [c.__module__ for c in cls.__mro__ if c.__module__ not in ("builtins", "abc")]
    seen: dict[str, ModuleType] = {}
    while todo:
        name = todo.pop()
        if name in seen or name not in sys.modules:
            continue
        seen[name] = sys.modules[name]
        for value in vars(seen[name]).values():
            if isinstance(value, ModuleType):
                ref = None if hasattr(value, "__path__") else value.__name__
            else:
                ref = getattr(value, "__module__", None)
            if isinstance(ref, str) and ref.split(".")[0] == "orchestra":
                todo.append(ref)
    return [seen[n] for n in sorted(seen)]


@functools.cache
def source_version(cls: type) -> str:
    """A short SHA-256 of the source of :func:`_version_modules` (computed once per class)."""
    digest = hashlib.sha256()
    for module in _version_modules(cls):
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError) as e:
            raise ToolError(
                f"tool class {cls.__name__}: cannot read the source of {module.__name__} to version it "
                f"({e}); set `version` on the class"
            ) from e
        digest.update(f"{module.__name__}\0{source}\0".encode())
    return digest.hexdigest()[:16]


class _SourceVersion:
    """The default of ``Tool.version``: :func:`source_version` of the class it is read from."""

    def __get__(self, obj: object, owner: type) -> str:
        return source_version(owner)


class Tool(ABC):
    """A tool. Subclasses set ``name``, ``description``, ``input_schema`` and implement ``run``.

    Call tools through :meth:`__call__`: it checks the arguments against ``input_schema`` (an
    unknown or missing argument, or one of the wrong JSON type, is a failed Observation that names
    it and lists the valid ones; a ``None`` value counts as not given), times the run and turns a
    *failure of the tool* into an error Observation the agent can read, so a bad input never
    crashes the caller. A failure of the tool is an :class:`OrchestraError` (ToolError, MediaError,
    ...) or one of the class's declared ``failure_kinds``: library exceptions its decoders raise on
    bad input that the tool does not convert itself (e.g. ``(OSError,)`` for a tool that reads and
    writes files the agent names). Tools convert library errors where they can (``load_image``
    turns PIL errors into MediaError, ``cv_guard`` turns ``cv2.error`` into MediaError). Anything
    else raised by ``run`` (KeyError, TypeError, AttributeError, ...) is a bug in our code and
    propagates: it is never evidence that a tool "missed".

    ``version`` names the tool's code for the perception cache: by default a short SHA-256 of the
    source of the modules the class is built from (its classes' modules and the orchestra modules
    they import from, transitively), so editing the tool or a helper it uses invalidates its
    cached observations. A class may set it to a fixed string instead.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]
    cost_per_call: ClassVar[float] = 0.0
    failure_kinds: ClassVar[FailureKinds] = ()
    version: ClassVar[str] = _SourceVersion()  # type: ignore[assignment]  # a str on every class

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        schema = cls.__dict__.get("input_schema")
        if schema is not None:
            undeclared = sorted(set(schema.get("required", [])) - set(schema.get("properties", {})))
            if undeclared:
                raise ToolError(f"tool class {cls.__name__}: required {undeclared} not in its properties")

    def config(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this tool from its class (a worker process builds its
        copy so); a tool that takes none has none."""
        return {}

    @abstractmethod
    def run(self, **kwargs: Any) -> Observation:
        """Do the work; raise OrchestraError (or one of ``failure_kinds``) on bad input."""

    def __call__(self, **kwargs: Any) -> Observation:
        start = time.perf_counter()
        try:
            obs = self.run(**self.check_args(kwargs))
        except (OrchestraError, *self.failure_kinds) as e:
            obs = self.failure(f"{type(e).__name__}: {e}")
        obs.latency_s = time.perf_counter() - start
        obs.cost = obs.cost or self.cost_per_call
        return obs

    def check_args(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``kwargs`` less ``None`` values, checked against ``input_schema``; a ToolError names a bad one."""
        props: Mapping[str, Any] = self.input_schema.get("properties", {})
        valid = ", ".join(props) or "none"
        unknown = [k for k in kwargs if k not in props]
        if unknown:
            raise ToolError(f"unknown argument(s) {unknown} for tool {self.name!r}; valid arguments: {valid}")
        args = {k: v for k, v in kwargs.items() if v is not None}
        missing = [k for k in self.input_schema.get("required", []) if k not in args]
        if missing:
            raise ToolError(f"missing required argument(s) {missing} for tool {self.name!r}")
        for k, v in args.items():
            problem = _type_problem(v, props[k])
            if problem:
                raise ToolError(f"argument {k!r} of tool {self.name!r} {problem}")
        return args

    def failure(self, message: str, **data: Any) -> Observation:
        return Observation(
            tool=self.name, ok=False, text=f"[{self.name} failed] {message}", error=message, data=data
        )

    def spec(self) -> dict[str, Any]:
        """The tool as an OpenAI-style function spec."""
        return {"name": self.name, "description": self.description, "parameters": self.input_schema}

    def close(self) -> None:  # noqa: B027 - a no-op default that tools holding resources override
        """Release what the tool holds (worker processes, connections); the default holds nothing."""


class ToolWrapper(Tool):
    """A tool standing in for ``inner`` (a cache in front of it, a worker pool behind it): argument
    checking, ``run``, ``spec`` and ``close`` are the inner tool's. Subclasses override ``__call__``;
    :func:`stand_in` makes the per-tool-class subclass that carries the inner class's attributes."""

    def __init__(self, inner: Tool) -> None:
        self.inner = inner
        self.version = inner.version  # an instance's own (a tool built with a vocabulary) or its class's

    def run(self, **kwargs: Any) -> Observation:
        return self.inner.run(**kwargs)

    def check_args(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return self.inner.check_args(kwargs)

    def spec(self) -> dict[str, Any]:
        return self.inner.spec()

    def close(self) -> None:
        """Close the wrapped tool (what the wrapper uses, a cache or a pool, belongs to others)."""
        self.inner.close()


W = TypeVar("W", bound=ToolWrapper)


@functools.cache
def stand_in(wrapper: type[W], cls: type[Tool]) -> type[W]:
    """A subclass of ``wrapper`` with ``cls``'s name, description, input schema, price, failure kinds and
    version (made once per pair), so a perception cache and the agent see the tool itself."""
    attrs = {
        "__module__": wrapper.__module__,
        "__qualname__": f"{wrapper.__name__}[{cls.__qualname__}]",
        "__doc__": cls.__doc__,
        "name": cls.name,
        "description": cls.description,
        "input_schema": cls.input_schema,
        "cost_per_call": cls.cost_per_call,
        "failure_kinds": cls.failure_kinds,
        "version": cls.version,
    }
    return type(f"{wrapper.__name__.removesuffix('Tool')}{cls.__name__}", (wrapper,), attrs)


class ToolRegistry:
    """Tools by name. Duplicate names are refused; an unknown name lists the valid ones.

    ``close()`` closes every tool; ``with registry:`` closes them on the way out."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ToolError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise ToolError(f"unknown tool {name!r}; valid tools: {', '.join(sorted(self._tools))}") from None

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._tools)

    def close(self) -> None:
        """Close every tool (each tool's :meth:`Tool.close`), even when one of them raises."""
        errors: list[Exception] = []
        for tool in self:
            try:
                tool.close()
            except Exception as e:  # noqa: BLE001 - collected, then re-raised once every tool is closed
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> ToolRegistry:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
