"""Object tracking through video frames: per-frame shape detection, association, event timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestra.tools.shapes import Shape, detect_shapes

_NEUTRAL = {"black", "gray", "white"}


@dataclass
class Track:
    """One object followed through the frames: per sampled frame its detection, or None."""

    dets: dict[int, Shape] = field(default_factory=dict)

    def last(self) -> tuple[int, Shape]:
        k = max(self.dets)
        return k, self.dets[k]


def frame_objects(frame: np.ndarray) -> list[Shape]:
    """Coloured objects in a frame (neutral blobs and full-width bands such as caption bars left out)."""
    w = frame.shape[1]
    return [
        s
        for s in detect_shapes(frame, min_area_frac=0.002)
        if s.colour not in _NEUTRAL and s.box[2] < 0.6 * w
    ]


def track_objects(frames: list[np.ndarray]) -> list[Track]:
    """Greedy nearest-centre association of detections between frames: a track may go unseen for up
    to 3 frames (flicker) and is matched within about a quarter of the frame width, same shape preferred;
    an object gone longer is a new track."""
    tracks: list[Track] = []
    reach = 0.25 * frames[0].shape[1]
    for k, frame in enumerate(frames):
        dets = frame_objects(frame)
        pairs = []
        for ti, tr in enumerate(tracks):
            lk, ls = tr.last()
            for di, d in enumerate(dets):
                dist = float(np.hypot(d.centre[0] - ls.centre[0], d.centre[1] - ls.centre[1]))
                cost = dist + (0 if d.shape == ls.shape else 0.5 * reach) + 2.0 * (k - lk - 1)
                if k - lk <= 4 and dist <= reach * (1 + 0.25 * (k - lk - 1)):
                    pairs.append((cost, ti, di))
        used_t, used_d = set(), set()
        for _, ti, di in sorted(pairs):
            if ti in used_t or di in used_d:
                continue
            tracks[ti].dets[k] = dets[di]
            used_t.add(ti)
            used_d.add(di)
        for di, d in enumerate(dets):
            if di not in used_d:
                tracks.append(Track(dets={k: d}))
    return [t for t in tracks if len(t.dets) >= 2]


def _majority(values: list[str]) -> str:
    return max(set(values), key=values.count)


def _moves(pos: np.ndarray) -> list[tuple[int, int]]:
    """(last still index, first still index) around each movement: detections whose centre shifts
    > 1.5 px across a 4-detection window, bridged over one quiet detection, net travel > 2.5 px; the
    ends are then pulled to where the centre leaves / reaches its resting place (within 0.75 px)."""
    n = len(pos)
    if n < 2:
        return []
    lo, hi = np.maximum(np.arange(n) - 2, 0), np.minimum(np.arange(n) + 2, n - 1)
    flag = np.hypot(*(pos[hi] - pos[lo]).T) > 1.5
    out: list[tuple[int, int]] = []
    i = 0
    while i < n:
        if not flag[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and (flag[j + 1] or (j + 2 < n and flag[j + 2])):
            j += 1
        rest0, rest1 = pos[max(i - 2, 0)], pos[min(j + 2, n - 1)]
        start = max([k for k in range(max(i - 2, 0), j + 1) if np.hypot(*(pos[k] - rest0)) <= 0.75] or [i])
        end = min(
            [k for k in range(max(start + 1, i), min(j + 3, n)) if np.hypot(*(pos[k] - rest1)) <= 0.75] or [j]
        )
        if np.hypot(*(pos[end] - pos[start])) > 2.5:
            out.append((start, end))
        i = j + 1
    return out


def object_events(
    frames: list[np.ndarray], step_s: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Events per tracked object: appear / disappear (visibility runs of >= 2 frames), colour_change
    (a new colour held >= 2 frames) and move (centre drifting > 2 px per frame), with times in seconds."""
    events: list[dict[str, Any]] = []
    objects = []
    last = len(frames) - 1
    for n, tr in enumerate(sorted(track_objects(frames), key=lambda t: min(t.dets)), 1):
        ks = sorted(tr.dets)
        shape = _majority([tr.dets[k].shape for k in ks])
        name = f"{shape}#{n}"
        first, end = ks[0], ks[-1]
        colours = [tr.dets[k].colour for k in ks]
        objects.append(
            {
                "id": name,
                "shape": shape,
                "first_colour": colours[0],
                "visible_s": [round(first * step_s, 3), round((end + 1) * step_s, 3)],
            }
        )
        if first > 0:
            events.append(
                {"t": round(first * step_s, 3), "kind": "appear", "object": name, "colour": colours[0]}
            )
        if end < last:
            events.append(
                {
                    "t": round((end + 1) * step_s, 3),
                    "kind": "disappear",
                    "object": name,
                    "colour": colours[-1],
                }
            )
        cur = colours[0]
        for i in range(1, len(ks)):
            c = colours[i]
            if c != cur and i + 1 < len(ks) and colours[i + 1] == c:
                events.append(
                    {
                        "t": round(ks[i] * step_s, 3),
                        "kind": "colour_change",
                        "object": name,
                        "from": cur,
                        "colour": c,
                    }
                )
                cur = c
        pos = np.array([tr.dets[k].centre for k in ks])
        for i, j in _moves(pos):
            events.append(
                {
                    "t": round(ks[i] * step_s, 3),
                    "kind": "move",
                    "object": name,
                    "t_end": round(ks[j] * step_s, 3),
                    "from": [round(v) for v in pos[i]],
                    "to": [round(v) for v in pos[j]],
                    "colour": colours[j],
                }
            )
    events.sort(key=lambda e: (e["t"], e["object"]))
    return events, objects
