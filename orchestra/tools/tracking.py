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


def track_objects(frames: list[np.ndarray]) -> tuple[list[Track], int]:
    """Greedy nearest-centre association of detections between frames: a track may go unseen for up
    to 3 frames (flicker) and is matched within about a quarter of the frame width, same shape preferred;
    an object gone longer is a new track. Returns the tracks seen in >= 2 frames and how many
    detections there were in all."""
    tracks: list[Track] = []
    n_dets = 0
    reach = 0.25 * frames[0].shape[1]
    for k, frame in enumerate(frames):
        dets = frame_objects(frame)
        n_dets += len(dets)
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
    return [t for t in tracks if len(t.dets) >= 2], n_dets


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


def sample_start(times: list[float], dt: float, k: int) -> float:
    """When something first seen in sample ``k`` began: midway between the previous sample's end
    and this sample (exact for every-frame sampling)."""
    return round(times[0] if k == 0 else (times[k - 1] + dt + times[k]) / 2, 3)


def start_error(times: list[float], dt: float, k: int) -> float:
    """How far :func:`sample_start` may be off: half the unseen frames before sample ``k`` (0 for
    every-frame sampling, where the start is exact to the frame)."""
    return 0.0 if k == 0 else round(max(0.0, times[k] - times[k - 1] - dt) / 2, 3)


def end_error(times: list[float], dt: float, k: int) -> float:
    """How far :func:`sample_end` may be off: half the unseen frames after sample ``k``."""
    return 0.0 if k == len(times) - 1 else round(max(0.0, times[k + 1] - times[k] - dt) / 2, 3)


def sample_end(times: list[float], dt: float, k: int, duration: float) -> float:
    """When something last seen in sample ``k`` ended: midway to the next sample (or the clip's end)."""
    return round(duration if k == len(times) - 1 else (times[k] + dt + times[k + 1]) / 2, 3)


def event_confidence(
    tracks: list[Track], n_dets: int, reach: float, last: int
) -> tuple[float, dict[str, Any]]:
    """How much the timeline can be trusted, from what the tracker could not explain (0-1).

    Starts at 0.95 and is multiplied down per sign of trouble: 0.45 per unexplained detection (seen
    in one sample only: a brief or late object, or a jump the association could not follow), 0.45
    per change seen only in the final sample (unconfirmed colour or position), 0.5 per track that
    ends where a same-shape track starts within two samples (a move too fast to follow, or a real
    vanish and reappear), ``1.4 - jump`` (at most 1) for the largest centre jump between samples
    as a share of the association reach, and the square of the weakest track's shape agreement.
    """
    kept = sum(len(t.dets) for t in tracks)
    orphans = n_dets - kept
    unconfirmed = 0
    jump, purity = 0.0, 1.0
    for tr in tracks:
        ks = sorted(tr.dets)
        shapes = [tr.dets[k].shape for k in ks]
        purity = min(purity, shapes.count(_majority(shapes)) / len(shapes))
        for a, b in zip(ks, ks[1:], strict=False):
            da, db = tr.dets[a], tr.dets[b]
            jump = max(
                jump, float(np.hypot(db.centre[0] - da.centre[0], db.centre[1] - da.centre[1])) / reach
            )
        if ks[-1] == last and len(ks) >= 2:
            a, b = tr.dets[ks[-2]], tr.dets[ks[-1]]
            moved = float(np.hypot(b.centre[0] - a.centre[0], b.centre[1] - a.centre[1])) > 2.5
            unconfirmed += int(a.colour != b.colour or moved)
    broken = sum(
        1
        for a in tracks
        for b in tracks
        if a is not b
        and 0 < min(b.dets) - max(a.dets) <= 2
        and _majority([d.shape for d in a.dets.values()]) == _majority([d.shape for d in b.dets.values()])
    )
    conf = 0.95 * 0.45**orphans * 0.45**unconfirmed * 0.5**broken * min(1.0, 1.4 - jump) * purity**2
    why = {
        "orphans": orphans,
        "unconfirmed": unconfirmed,
        "broken": broken,
        "jump": round(jump, 2),
        "purity": round(purity, 2),
    }
    return round(float(np.clip(conf, 0.0, 1.0)), 3), why


def object_events(
    frames: list[np.ndarray], times: list[float], dt: float, duration: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float, dict[str, Any]]:
    """Events per tracked object: appear / disappear (visibility runs of >= 2 samples), colour_change
    (a new colour held >= 2 samples) and move (centre drifting between resting places), with times
    in seconds and ``t_error_s``, how far a time may be off (half the unseen frames around it: 0
    when every frame is sampled); ``times`` are the samples' times, ``dt`` one frame. Returns
    (events, objects, confidence, what lowered it) - see :func:`event_confidence`."""
    events: list[dict[str, Any]] = []
    objects = []
    last = len(frames) - 1
    tracks, n_dets = track_objects(frames)
    for n, tr in enumerate(sorted(tracks, key=lambda t: min(t.dets)), 1):
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
                "visible_s": [sample_start(times, dt, first), sample_end(times, dt, end, duration)],
            }
        )
        if first > 0:
            events.append(
                {
                    "t": sample_start(times, dt, first),
                    "t_error_s": start_error(times, dt, first),
                    "kind": "appear",
                    "object": name,
                    "colour": colours[0],
                }
            )
        if end < last:
            events.append(
                {
                    "t": sample_end(times, dt, end, duration),
                    "t_error_s": end_error(times, dt, end),
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
                        "t": sample_start(times, dt, ks[i]),
                        "t_error_s": start_error(times, dt, ks[i]),
                        "after_s": round(times[ks[i - 1]], 3),  # last sample in the old colour
                        "at": [round(v, 1) for v in tr.dets[ks[i]].centre],
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
                    "t": round(times[ks[i]], 3),
                    "t_error_s": start_error(times, dt, ks[i]),
                    "kind": "move",
                    "object": name,
                    "t_end": round(times[ks[j]], 3),
                    "from": [round(v) for v in pos[i]],
                    "to": [round(v) for v in pos[j]],
                    "colour": colours[j],
                }
            )
    events.sort(key=lambda e: (e["t"], e["object"]))
    conf, why = event_confidence(tracks, n_dets, 0.25 * frames[0].shape[1], last)
    return events, objects, conf, why


def change_gaps(events: list[dict[str, Any]], fps: float) -> dict[int, list[int]]:
    """Per colour change timed between samples (``t_error_s`` > half a frame), the unseen frame
    indices between its last old-colour sample and its first new-colour one."""
    gaps: dict[int, list[int]] = {}
    for n, e in enumerate(events):
        if e["kind"] == "colour_change" and float(e.get("t_error_s") or 0.0) > 0.5 / fps:
            first = int(round(float(e["after_s"]) * fps)) + 1
            gaps[n] = list(range(first, int(round((float(e["t"]) + float(e["t_error_s"])) * fps))))
    return gaps


def refine_changes(
    events: list[dict[str, Any]], gaps: dict[int, list[int]], frames: dict[int, np.ndarray], fps: float
) -> None:
    """Time each gapped colour change to the frame (in place): the first unseen frame where the
    object nearest the change's place (same shape) already shows the new colour; the change's own
    sample when none does. ``t_error_s`` becomes 0 for a change whose gap frames were all read."""
    for n, idx in gaps.items():
        e = events[n]
        if not idx or any(i not in frames for i in idx):
            continue
        shape = str(e["object"]).split("#")[0]
        at = np.array(e["at"], dtype=float)
        when = round((float(e["t"]) + float(e["t_error_s"])) * fps) / fps  # the first new-colour sample
        for i in idx:
            near = [s for s in frame_objects(frames[i]) if s.shape == shape]
            if (
                near
                and min(near, key=lambda s: float(np.hypot(*(np.array(s.centre) - at)))).colour == e["colour"]
            ):
                when = i / fps
                break
        e["t"], e["t_error_s"] = round(when, 3), 0.0
    events.sort(key=lambda e: (e["t"], e["object"]))
