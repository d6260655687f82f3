"""Task files from someone else: seed_tasks reads only the files the tasks name inside the folder the
task file names, refuses links, odd files and unbounded text with an error naming the task, and
keeps the previous output (issue 47). The media check also holds where the tools open a task's media."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from orchestra.config import SeedParams
from orchestra.data.seeds import build_seed_tasks
from orchestra.errors import OrchestraError, RecordError, StageError
from orchestra.io import media_file
from orchestra.tools.media import wav_bytes

#: the bytes of a file outside every data folder, which must never reach one
SECRET = b"secret-outside-the-seed-folder-7f3a"


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


def _regular(p: Path) -> bool:
    """A file of its own (a drop folder's links are the test's, not the pipeline's copies)."""
    return p.is_file() and not p.is_symlink()


def _task(tid: object = "t1", path: str = "images/a.png", kind: str = "image", **over: object) -> dict:
    task = {"id": tid, "question": "How many red squares are in the image?", "answer": "1"}
    task["omni_modal_input"] = [{"type": kind, "id": "image_1", "path": path}]
    return {**task, **over}


class World:
    """A hand-over folder (``drop/tasks.json`` and ``drop/media``), a secret outside it, and the
    seed_tasks output of a good file, written first so that every hostile run must leave it intact."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.drop, self.out = tmp, tmp / "drop", tmp / "data" / "seed_tasks"
        self.secret = tmp / "outside" / "secret.png"
        self.secret.parent.mkdir(parents=True)
        self.secret.write_bytes(_png() + SECRET)  # a real PNG, so only the path can give it away
        (self.drop / "media" / "images").mkdir(parents=True)
        (self.drop / "media" / "images" / "a.png").write_bytes(_png())
        self.write([_task()])
        build_seed_tasks(self.params(), self.out)
        self.before = self.snapshot()

    def write(self, tasks: object, raw: bytes | None = None) -> Path:
        path = self.drop / "tasks.json"
        path.write_bytes(raw if raw is not None else json.dumps(tasks).encode())
        return path

    def params(self, **limits: int) -> SeedParams:
        path = str(self.drop / "tasks.json")
        return SeedParams(source="omnigaia_file", path=path, incoming=None, limits=limits)

    def snapshot(self) -> dict[str, bytes]:
        return {
            p.relative_to(self.out).as_posix(): p.read_bytes() for p in self.out.rglob("*") if p.is_file()
        }

    def refused(self, match: str, incoming: Path | None = None, **limits: int) -> str:
        """Run seed_tasks, expect an error of ours (StageError, RecordError) matching ``match``; the
        previous output is intact and no file under the data folder holds the secret."""
        with pytest.raises(OrchestraError, match=match) as err:
            build_seed_tasks(self.params(**limits), self.out, incoming)
        assert self.snapshot() == self.before
        leaked = [p for p in (self.tmp / "data").rglob("*") if _regular(p) and SECRET in p.read_bytes()]
        assert leaked == []
        return str(err.value)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_symlink_under_media_pointing_outside_is_refused_not_copied(world: World) -> None:
    (world.drop / "media" / "images" / "link.png").symlink_to(world.secret)
    world.write([_task(path="images/link.png")])
    msg = world.refused(r"task 't1'.*images/link.png.*is a symbolic link, which is never followed")
    assert str(world.drop / "tasks.json") in msg


def test_a_link_put_in_place_after_the_check_is_refused_by_the_copy_itself(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy opens each part with O_NOFOLLOW: with the check before it skipped (as if the link
    appeared between the two), the copy still refuses it and writes nothing."""
    import orchestra.io

    (world.drop / "media" / "images").rename(world.tmp / "images_elsewhere")
    (world.drop / "media" / "images").symlink_to(world.tmp / "images_elsewhere")
    monkeypatch.setattr(orchestra.io, "media_file", lambda root, rel: Path(root) / rel)
    dst = world.tmp / "data" / "copy.png"
    with pytest.raises(RecordError, match="cannot be opened without following a link"):
        orchestra.io.copy_media(world.drop, "media/images/a.png", dst)
    assert not dst.exists()


def test_a_media_folder_that_is_itself_a_link_is_refused(world: World) -> None:
    (world.drop / "media").rename(world.tmp / "elsewhere")
    (world.drop / "media").symlink_to(world.tmp / "elsewhere")
    world.refused(r"task 't1'.*media/images/a.png.*symbolic link")


def test_a_link_in_the_folder_that_no_task_names_is_never_read(world: World) -> None:
    (world.drop / "media" / "images" / "unnamed.png").symlink_to(world.secret)
    (world.drop / "media" / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(world.drop / "media" / "fifo")  # a FIFO would hang a reader that opened it
    summary = build_seed_tasks(world.params(), world.out)
    assert summary["rows"] == 1
    assert sorted(world.snapshot()) == ["media/images/a.png", "summary.json", "tasks.json"]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/etc/hostname", "it is absolute"),
        ("../../outside/secret.png", r"climbs out of the media folder"),
        ("images/../../../outside/secret.png", r"climbs out"),
        ("images//a.png", "not in normal form"),
        ("./images/a.png", "not in normal form"),
        ("images/a.png\x00.txt", "control character"),
        ("images/a\n.png", "control character"),
        ("images\\a.png", "backslash"),
        ("", "it is empty"),
    ],
)
def test_a_media_path_that_is_not_a_plain_relative_path_is_refused_by_name(
    world: World, path: str, why: str
) -> None:
    world.write([_task(path=path)])
    world.refused(f"task 't1'.*{why}")


def test_a_hard_link_to_a_file_outside_is_refused(world: World) -> None:
    os.link(world.secret, world.drop / "media" / "images" / "hard.png")
    world.write([_task(path="images/hard.png")])
    world.refused(r"task 't1'.*images/hard.png.*2 hard links")


def test_a_fifo_a_folder_and_a_device_named_as_media_are_refused_without_hanging(world: World) -> None:
    images = world.drop / "media" / "images"
    os.mkfifo(images / "pipe.png")
    (images / "folder.png").mkdir()
    cases = [("images/pipe.png", "not a regular file"), ("images/folder.png", "not a regular file")]
    try:
        os.mknod(images / "zero.png", 0o600 | 0o020000, os.makedev(1, 5))  # a character device
        cases.append(("images/zero.png", "not a regular file"))
    except PermissionError:
        assert os.geteuid() != 0  # only root may make device nodes; CI runs as root
    for path, why in cases:
        world.write([_task(path=path)])
        world.refused(f"task 't1'.*{why}")


def test_an_empty_file_and_a_file_whose_bytes_lie_about_its_kind_are_refused(world: World) -> None:
    images = world.drop / "media" / "images"
    (images / "empty.png").write_bytes(b"")
    (images / "beeps.png").write_bytes(wav_bytes(np.zeros(800, dtype=np.float32), 8000))
    (images / "noise.png").write_bytes(np.random.default_rng(0).bytes(4096))
    world.write([_task(path="images/empty.png")])
    world.refused(r"task 't1'.*empty \(0 bytes\)")
    world.write([_task(path="images/beeps.png")])
    world.refused(r"task 't1'.*declared image, but its bytes are audio/x-wav")
    world.write([_task(path="images/noise.png")])
    world.refused(r"task 't1'.*declared image, but its bytes are of no known media format")


def test_text_and_media_beyond_the_limits_are_refused_before_any_stage_reads_them(world: World) -> None:
    world.write([_task(question="count " * 200_000)])
    world.refused(r"task 't1'.*question is 1,200,000 characters \(seed.limits.question_chars 16,000\)")
    world.write([_task(answer="x" * 5000)])
    world.refused(r"task 't1'.*answer is 5,000 characters")
    world.write(
        [_task(omni_modal_input=[{"type": "image", "id": f"i{k}", "path": "images/a.png"} for k in range(3)])]
    )
    world.refused(r"task 't1'.*names 3 media \(seed.limits.media_per_task 2\)", media_per_task=2)
    world.write([_task()])
    world.refused(r"task 't1'.*images/a.png' is \d+ bytes \(seed.limits.media_bytes 10\)", media_bytes=10)


def test_duplicate_and_unsafe_ids_are_refused(world: World) -> None:
    world.write([_task("t1"), _task("t1")])
    world.refused(r"task 't1'.*taken by an earlier task")
    for tid, why in [
        ("../../etc", "not a letter or digit"),
        ("a b", "not a letter or digit"),
        ("x" * 200, "200 characters"),
    ]:
        world.write([_task(tid)])
        world.refused(why)


def test_duplicate_ids_across_the_file_and_an_incoming_drop_are_refused(world: World) -> None:
    incoming = world.tmp / "data" / "incoming"
    (incoming / "media" / "images").mkdir(parents=True)
    (incoming / "media" / "images" / "b.png").write_bytes(_png())
    (incoming / "more.json").write_text(json.dumps([_task("t1", path="images/b.png")]))
    world.refused(r"incoming seeds .*more.json: task id 't1' is already taken", incoming=incoming)


def test_an_incoming_drop_cannot_reach_outside_or_write_outside_the_staging_folder(world: World) -> None:
    incoming = world.tmp / "data" / "incoming"
    (incoming / "media").mkdir(parents=True)
    (incoming / "media" / "link.png").symlink_to(world.secret)
    for path in ("link.png", "../../outside/secret.png", "/etc/hostname"):
        (incoming / "new.json").write_text(json.dumps([_task("n1", path=path)]))
        world.refused(r"incoming seeds .*new.json", incoming=incoming)
    assert sorted(p.name for p in world.tmp.iterdir()) == ["data", "drop", "outside"]


def test_malformed_and_deeply_nested_json_are_clear_errors(world: World) -> None:
    world.write(None, raw=b"[" * 100_000 + b"]" * 100_000)
    world.refused(r"tasks.json: not an OmniGAIA task list")
    world.write(
        [{"id": "t9", "question": "q?", "answer": "1", "omni_modal_input": [{"type": "image", "id": "i"}]}]
    )
    world.refused(r"task 't9': 0.omni_modal_input.0.path: Field required")
    world.write(None, raw=b"\xff\xfe not json")
    world.refused(r"tasks.json: not an OmniGAIA task list")


def test_a_knowledge_base_that_is_a_link_is_refused(world: World) -> None:
    (world.tmp / "outside" / "pages.jsonl").write_bytes(SECRET + b"\n")
    (world.drop / "kb").mkdir()
    (world.drop / "kb" / "pages.jsonl").symlink_to(world.tmp / "outside" / "pages.jsonl")
    world.refused(r"its knowledge base: .*kb/pages.jsonl")


def test_the_tools_open_a_tampered_tasks_media_only_inside_the_media_folder(world: World) -> None:
    media = world.out / "media"
    assert media_file(media, "images/a.png") == media / "images" / "a.png"
    (media / "images" / "evil.png").symlink_to(world.secret)
    for path, why in [
        ("images/evil.png", "symbolic link"),
        ("/etc/hostname", "absolute"),
        ("../tasks.json", "climbs"),
    ]:
        with pytest.raises(RecordError, match=why):
            media_file(media, path)


def test_the_builtin_expert_reports_a_tampered_media_path_as_a_failed_sub_task(world: World) -> None:
    import asyncio

    from orchestra.backends.base import SubTaskInput
    from orchestra.backends.builtin import BuiltinExpert
    from orchestra.backends.goals import perception_goal
    from orchestra.schemas import ModalInput, SubTask

    media = world.out / "media"
    (media / "images" / "evil.png").symlink_to(world.secret)
    tampered = ModalInput(type="image", id="image_1", path="images/evil.png")
    node = SubTask(id="E1", goal=perception_goal("read_text", {}, "#M1"), modalities=["M1"])
    sti = SubTaskInput(question="q", subtask=node, modal_inputs={"M1": tampered}, media_root=str(media))
    res = asyncio.run(BuiltinExpert("vision", {"ocr": 1.0}).run(sti, []))
    assert not res.ok and "images/evil.png" in (res.error or "") and "symbolic link" in (res.error or "")


def test_a_dataset_copy_cannot_name_files_outside_its_folders(tmp_path: Path) -> None:
    """COCO and LongVideoBench annotation files name their media: climbing, absolute and linked
    names are refused by name (seed.path's error), and the previous output stays."""
    from test_sources import _coco, _lvb

    from orchestra.data.seed_checks import safe_id

    secret = tmp_path / "secret.jpg"
    secret.write_bytes(_png() + SECRET)
    out = tmp_path / "data" / "seed_tasks"
    coco = _coco(tmp_path / "coco")
    build_seed_tasks(SeedParams(source="coco", path=str(coco), incoming=None), out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    ann = coco / "annotations" / "instances_val2017.json"
    inst = json.loads(ann.read_text())
    for name, why in [
        ("../../secret.jpg", "climbs out"),
        ("/etc/hostname", "absolute"),
        ("l.jpg", "symbolic link"),
    ]:
        (coco / "val2017" / "l.jpg").unlink(missing_ok=True)
        (coco / "val2017" / "l.jpg").symlink_to(secret)
        inst["images"][1]["file_name"] = name  # image 139, which has instances
        ann.write_text(json.dumps(inst))
        with pytest.raises(StageError, match=f"seed.path: media path {name!r}: .*{why}"):
            build_seed_tasks(SeedParams(source="coco", path=str(coco), incoming=None), out)
    lvb = _lvb(tmp_path / "lvb")
    entries = json.loads((lvb / "lvb_val.json").read_text())
    (lvb / "lvb_val.json").write_text(json.dumps([{**entries[0], "video_path": "../../secret.jpg"}]))
    with pytest.raises(StageError, match="climbs out"):
        build_seed_tasks(SeedParams(source="longvideobench", path=str(lvb), incoming=None), out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert not any(SECRET in p.read_bytes() for p in (tmp_path / "data").rglob("*") if _regular(p))
    # FineVideo's video file names become ids and file names: made safe
    assert safe_id("évil name") == "x_vil_name" and safe_id(".hidden") == "x.hidden"
