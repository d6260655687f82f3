"""Fonts that exist on every install: Pillow's bundled scalable font and matplotlib's bundled DejaVu set."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from PIL import ImageFont

from orchestra.errors import WorldError

# Font names a renderer may pick; "aileron" is Pillow's built-in, the rest ship inside matplotlib.
FONT_NAMES: tuple[str, ...] = (
    "aileron",
    "dejavu-sans",
    "dejavu-sans-bold",
    "dejavu-serif",
    "dejavu-serif-bold",
    "dejavu-mono-bold",
)
_FILES = {
    "dejavu-sans": "DejaVuSans.ttf",
    "dejavu-sans-bold": "DejaVuSans-Bold.ttf",
    "dejavu-serif": "DejaVuSerif.ttf",
    "dejavu-serif-bold": "DejaVuSerif-Bold.ttf",
    "dejavu-mono-bold": "DejaVuSansMono-Bold.ttf",
}


@lru_cache(maxsize=1)
def _dejavu_dir() -> Path:
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        raise WorldError("matplotlib is not installed; its bundled DejaVu fonts are needed for rendering")
    folder = Path(list(spec.submodule_search_locations)[0]) / "mpl-data" / "fonts" / "ttf"
    if not (folder / "DejaVuSans.ttf").is_file():
        raise WorldError(f"DejaVu fonts not found in {folder}")
    return folder


@lru_cache(maxsize=256)
def font(name: str, size: int) -> ImageFont.FreeTypeFont:
    """A TrueType font by name (see FONT_NAMES) at ``size`` px."""
    if name == "aileron":
        f = ImageFont.load_default(size=size)
        if not isinstance(f, ImageFont.FreeTypeFont):
            raise WorldError("Pillow was built without FreeType; scalable fonts are needed")
        return f
    if name not in _FILES:
        raise WorldError(f"unknown font {name!r}; known: {list(FONT_NAMES)}")
    return ImageFont.truetype(str(_dejavu_dir() / _FILES[name]), size)
