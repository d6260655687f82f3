"""espeak-ng speech and the English number words, shared by the world (which speaks numbers and
years) and the speech tool (which renders its word templates): one subprocess call, one resampler,
one word list."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from xml.sax.saxutils import escape

import numpy as np

from orchestra.errors import OrchestraError

#: zero..nineteen, then the tens by their digit (TENS[2] = "twenty")
UNITS: tuple[str, ...] = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
)
TENS: tuple[str, ...] = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def available() -> bool:
    return shutil.which("espeak-ng") is not None


#: espeak-ng runs per sound at most: a sound counts once two runs of the same arguments agree
AGREE_TRIES = 4


def _speak(
    args: list[str], failed: str, timeout_s: float, error: type[OrchestraError]
) -> tuple[np.ndarray, int]:
    """espeak-ng run with ``args`` (which ask for a WAV on stdout): its float samples and rate. A
    missing binary, a failed run or an unreadable WAV raises ``error`` (``failed`` says what failed).

    The same arguments do not always give the same samples: Debian 12's espeak-ng 1.51 wrote one WAV
    of a short number differently in one of some 4,000 runs here (under load), and a fresh clone's
    world once held a speech file no other run of its params rendered. So a sound is taken only when
    two runs agree byte for byte (nearly always the first two); :data:`AGREE_TRIES` runs that never
    agree raise ``error``."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise error("espeak-ng is not installed (the Debian package espeak-ng; make setup installs it)")
    seen: set[bytes] = set()
    for _ in range(AGREE_TRIES):
        try:
            out = subprocess.run([exe, *args], check=True, capture_output=True, timeout=timeout_s).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise error(f"{failed}: {e}") from e
        if out in seen:
            return _samples(out, failed, error)
        seen.add(out)
    raise error(f"{failed}: {AGREE_TRIES} runs gave {len(seen)} different sounds, no two the same")


def _samples(wav: bytes, failed: str, error: type[OrchestraError]) -> tuple[np.ndarray, int]:
    try:
        with wave.open(io.BytesIO(wav)) as w:
            rate, raw = w.getframerate(), w.readframes(w.getnframes())
    except (wave.Error, EOFError) as e:
        raise error(f"{failed}: {e}") from e
    return np.frombuffer(raw, dtype="<i2").astype(np.float64) / 32768.0, rate


def espeak(
    text: str, voice: str, speed: int, gap: int = 0, *, error: type[OrchestraError] = OrchestraError
) -> tuple[np.ndarray, int]:
    """``text`` spoken by espeak-ng as float samples in [-1, 1] and their rate; ``gap``: extra pause
    between words in units of 10 ms (at the default speed; espeak-ng's ``-g``). Failures raise
    ``error`` (the caller's kind: WorldError for the world, ToolError for a tool)."""
    args = ["-v", voice, "-s", str(speed), "-g", str(gap), "--stdout", text]
    x, rate = _speak(args, f"espeak-ng -v {voice} failed on {text!r}", 30, error)
    if not len(x) or not np.any(x):
        raise error(f"espeak-ng -v {voice} produced no sound for {text!r}")
    return x, rate


def espeak_each(
    texts: list[str], voice: str, speed: int, *, error: type[OrchestraError] = OrchestraError
) -> list[tuple[np.ndarray, int]]:
    """Each of ``texts`` spoken by espeak-ng, from one call: the texts are read as one SSML document
    with a 600 ms break after each, and the sound is cut at the breaks (runs of over 300 ms below
    1 % of full scale; a text's own pauses are far shorter). A cut that does not give one piece per
    text raises ``error``: the caller never gets a sound paired with the wrong text."""
    if not texts:
        return []
    doc = "<speak>" + "".join(f'{escape(t)}<break time="600ms"/>' for t in texts) + "</speak>"
    args = ["-m", "-v", voice, "-s", str(speed), "--stdout", doc]
    x, rate = _speak(args, f"espeak-ng -v {voice} failed on {len(texts)} texts", 300, error)
    hop = rate // 100
    n = len(x) // hop
    loud = np.flatnonzero(np.abs(x[: n * hop]).reshape(n, hop).max(axis=1) > 0.01)
    if not len(loud):
        raise error(f"espeak-ng -v {voice} produced no sound for {len(texts)} texts")
    pieces = np.split(loud, np.flatnonzero(np.diff(loud) > 30) + 1)
    if len(pieces) != len(texts):
        raise error(f"espeak-ng -v {voice}: {len(texts)} texts came out as {len(pieces)} pieces of sound")
    return [(x[max(0, (p[0] - 5) * hop) : (p[-1] + 6) * hop], rate) for p in pieces]


def version(error: type[OrchestraError] = OrchestraError) -> str:
    """``espeak-ng --version`` (what a cache of its renderings is keyed by)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise error("espeak-ng is not installed (the Debian package espeak-ng; make setup installs it)")
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise error(f"espeak-ng --version failed: {e}") from e


def resample(x: np.ndarray, rate: int, to: int) -> np.ndarray:
    """``x`` at ``rate`` Hz resampled to ``to`` Hz (linear interpolation after a moving-average
    anti-alias filter when going down)."""
    if rate == to:
        return x
    if to < rate:
        k = int(np.ceil(rate / to))
        x = np.convolve(x, np.ones(k) / k, mode="same")
    n = int(round(len(x) * to / rate))
    return np.interp(np.arange(n) * rate / to, np.arange(len(x)), x)
