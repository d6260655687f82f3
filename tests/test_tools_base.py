"""The Tool seam: which errors become failed observations, argument checks, and closing tools."""

from __future__ import annotations

import inspect
import wave
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from orchestra.errors import OrchestraError, ToolError
from orchestra.tools.base import FailureKinds, Observation, Tool, ToolRegistry
from orchestra.tools.image import ImageCountObjects
from orchestra.tools.registry import tool_classes


class Probe(Tool):
    """Raises what it is told to, else echoes its arguments."""

    name: ClassVar[str] = "probe"
    description: ClassVar[str] = "raise ``error`` or echo"
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "label": {"type": "string"},
        },
        "required": ["n"],
    }
    failure_kinds: ClassVar[FailureKinds] = (wave.Error,)

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.closed = 0

    def run(
        self, n: int, x: float = 0.0, tags: list[str] | None = None, label: str | None = None
    ) -> Observation:
        if self.error is not None:
            raise self.error
        return Observation(tool=self.name, text="ok", data={"n": n, "x": x, "tags": tags, "label": label})

    def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("bug", [KeyError("value"), TypeError("unsupported operand"), AttributeError("x")])
def test_a_bug_inside_a_tool_propagates(bug: Exception) -> None:
    with pytest.raises(type(bug)):
        Probe(bug)(n=1)


@pytest.mark.parametrize("bug", [ValueError("bad"), OSError("disk")])
def test_undeclared_library_errors_propagate_too(bug: Exception) -> None:
    with pytest.raises(type(bug)):
        Probe(bug)(n=1)


@pytest.mark.parametrize(
    "error", [ToolError("refused: no such page"), OrchestraError("base"), wave.Error("bad chunk")]
)
def test_orchestra_errors_and_declared_kinds_are_failed_observations(error: Exception) -> None:
    obs = Probe(error)(n=1)
    assert not obs.ok and obs.text.startswith("[probe failed]")
    assert obs.error == f"{type(error).__name__}: {error}"


def test_unknown_missing_and_mistyped_arguments_are_failed_observations() -> None:
    probe = Probe()
    obs = probe(n=1, colr="red", zz=2)
    assert not obs.ok and "unknown argument(s) ['colr', 'zz']" in (obs.error or "")
    assert "valid arguments: n, x, tags, label" in (obs.error or "")
    assert "unknown argument(s) ['colr']" in (probe(n=1, colr=None).error or "")  # even when null
    assert "missing required argument(s) ['n']" in (probe(x=1.0).error or "")
    assert "missing required argument(s) ['n']" in (probe(n=None).error or "")  # null means not given
    assert "'n'" in (probe(n="3").error or "") and "must be an integer" in (probe(n="3").error or "")
    assert "must be an integer" in (probe(n=True).error or "")
    assert "must be a number" in (probe(n=1, x="1.5").error or "")
    assert "item 1 must be a string" in (probe(n=1, tags=["a", 2]).error or "")
    ok = probe(n=np.int64(2), x=np.float32(0.5), tags=("a",), label=None)
    assert ok.ok and ok.data == {"n": 2, "x": 0.5, "tags": ("a",), "label": None}
    assert probe(n=4.0).ok  # an integral float is an integer


def test_every_tool_declares_exactly_what_its_run_takes() -> None:
    for cls in tool_classes():
        params = inspect.signature(cls.run).parameters
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), f"{cls.name} drops arguments"
        assert [k for k in params if k != "self"] == list(cls.input_schema["properties"]), cls.name
        required = {k for k, p in params.items() if k != "self" and p.default is p.empty}
        assert required == set(cls.input_schema.get("required", [])), cls.name


def test_a_schema_requiring_an_undeclared_argument_is_refused() -> None:
    with pytest.raises(ToolError, match=r"required \['b'\] not in its properties"):

        class Bad(Probe):  # defining it is the test
            input_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}, "required": ["b"]}


def test_unknown_colour_is_an_observation_and_color_is_an_alias(tmp_path: Path) -> None:
    from orchestra.world.image import render_shapes, save_png

    img, _ = render_shapes(np.random.default_rng(3), 0.2)
    save_png(img, tmp_path / "s.png")
    tool = ImageCountObjects()
    bad = tool(path=str(tmp_path / "s.png"), colour="octarine")
    assert not bad.ok and (bad.error or "").startswith("ToolError: unknown colour")
    assert (
        tool(path=str(tmp_path / "s.png"), color="red").data
        == tool(path=str(tmp_path / "s.png"), colour="red").data
    )


def test_tools_and_registries_close() -> None:
    class Plain(Probe):
        name: ClassVar[str] = "plain"

        def close(self) -> None:
            Tool.close(self)  # the default: nothing to release

    a = Probe()
    reg = ToolRegistry([a, Plain()])
    with reg as same:
        assert same is reg
    assert a.closed == 1
    reg.close()
    assert a.closed == 2


def test_registry_closes_every_tool_even_when_one_fails() -> None:
    class Failing(Probe):
        name: ClassVar[str] = "failing"

        def close(self) -> None:
            raise ToolError("cannot stop")

    ok = Probe()
    with pytest.raises(ToolError, match="cannot stop"):
        ToolRegistry([Failing(), ok]).close()
    assert ok.closed == 1
