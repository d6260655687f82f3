"""Screenshots of the Dagster UI and the MLflow UI, taken with headless Chromium, for the docs.

Starts ``dagster-webserver`` (code location ``dagster_project.definitions``, run history from
``$DAGSTER_HOME``, default ``<repo>/.dagster``) and ``mlflow ui`` (store ``sqlite:///<repo>/mlflow.db``)
from ``.venv/bin`` on free ports of 127.0.0.1, waits until both answer HTTP, drives the system Chromium
(Debian package ``chromium``) through Playwright, and always stops both servers again. It saves:

* ``dagster_asset_graph.png``: the global asset lineage with every group expanded, fitted at a zoom that
  shows the full asset nodes (status, asset checks, kinds);
* ``dagster_latest_run.png``: the page of the newest Dagster run;
* ``mlflow_dagrpo_run.png``: the "Model metrics" tab of the newest MLflow run tagged
  ``orchestra.recipe = dagrpo``, filtered to its reward curves.

Nothing downloads a browser: Playwright is pointed at the system Chromium (``playwright install`` is
never needed). Usage::

    .venv/bin/python scripts/ui_screenshots.py [--out docs] [--timeout 180]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import sync_playwright
except ImportError:  # reported in main(), after the check for chromium
    sync_playwright = None  # type: ignore[assignment]
    PlaywrightError = PlaywrightTimeoutError = RuntimeError  # type: ignore[assignment,misc]

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"
MLFLOW_DB = REPO / "mlflow.db"
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser")
CHROMIUM_APT_PACKAGE = "chromium"
PLAYWRIGHT_REQUIREMENT = "playwright==1.65.2"

# Dagster draws simplified asset nodes (name only, no status or checks) below this zoom
# (MINIMAL_SCALE in the Dagster UI); the graph screenshot aims a little above it.
DAGSTER_MINIMAL_SCALE = 0.6
DAGSTER_TARGET_SCALE = 0.72
GRAPH_VIEWPORT = {"width": 2400, "height": 1400}
GRAPH_MIN_HEIGHT = 720
RUN_VIEWPORT = {"width": 2000, "height": 1200}
MLFLOW_VIEWPORT = {"width": 2000, "height": 1600}
MAX_VIEWPORT_SIDE = 5000
MLFLOW_CARD = "[data-testid=experiment-view-compare-runs-card]"  # one metric chart

# Browser state a returning user would have: the Dagster community pop-up and the MLflow assistant
# panel dismissed, and MLflow on its "Model training" side (keys as the two UIs store them).
INIT_SCRIPT = """
try {
  localStorage.setItem('communityNux', 'true');
  localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');
  localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
  localStorage.setItem('mlflow.workflowType_v1', JSON.stringify('machine_learning'));
} catch (e) {}
"""

# A fingerprint of what the page shows: its text plus the boxes of the elements that animate or
# render late (Gantt chart bars, plot traces). The page is taken as settled once it stops changing.
FINGERPRINT_JS = """
(selector) => {
  const rects = selector
    ? [...document.querySelectorAll(selector)].map((e) => {
        const r = e.getBoundingClientRect();
        return [Math.round(r.x), Math.round(r.y), Math.round(r.width), Math.round(r.height)].join(',');
      })
    : [];
  const text = document.body.innerText;
  return text.length + '|' + text.slice(0, 20000) + '|' + rects.join(';');
}
"""

# The asset graph is drawn, shows every asset name, and no node's status row reads "Loading..." any more.
GRAPH_LOADED_JS = """
(names) => {
  const svg = document.querySelector('svg[class*=svgContainer]');
  if (svg === null || /Loading(\\.\\.\\.|\\u2026)/.test(svg.textContent)) return false;
  return names.every((name) => svg.textContent.includes(name));
}
"""


class ScreenshotError(RuntimeError):
    """A failure that ends the script with a one-line error message."""


def find_chromium() -> str:
    """The path of the system Chromium, or a ScreenshotError naming the Debian package."""
    override = os.environ.get("CHROMIUM")
    if override:
        if shutil.which(override):
            return str(shutil.which(override))
        raise ScreenshotError(f"CHROMIUM={override} is not an executable")
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise ScreenshotError(
        f"chromium not found; install the Debian package '{CHROMIUM_APT_PACKAGE}' "
        f"(apt-get install -y {CHROMIUM_APT_PACKAGE})"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env() -> dict[str, str]:
    """The environment for the servers and this process: offline, no telemetry, the project's store."""
    env = dict(os.environ)
    env.setdefault("DAGSTER_HOME", str(REPO / ".dagster"))
    env["MLFLOW_ENABLE_TELEMETRY"] = "false"
    env["HF_HUB_OFFLINE"] = "1"
    env["DO_NOT_TRACK"] = "1"
    # Viewing needs no MLflow job runner (six huey consumer processes for GenAI evaluation jobs).
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    return env


class Server:
    """A server subprocess in its own process group, with its output in a log file."""

    def __init__(self, name: str, argv: list[str], health_url: str, log_dir: Path, env: dict[str, str]):
        self.name = name
        self.argv = argv
        self.health_url = health_url
        self.log_path = log_dir / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not Path(self.argv[0]).exists():
            raise ScreenshotError(f"{self.argv[0]} is missing; run `make setup` first")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=REPO,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def wait_ready(self, deadline: float) -> None:
        """Poll the health URL until it answers 200; fail if the process exits or time runs out."""
        assert self.proc is not None
        while True:
            if self.proc.poll() is not None:
                raise ScreenshotError(
                    f"{self.name} exited with code {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.health_url, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ScreenshotError(
                    f"{self.name} did not answer {self.health_url} in time:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM the server's process group (the Dagster code server included), SIGKILL stragglers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):  # children that outlived their parent
            os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def servers(timeout: float, env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """Run dagster-webserver and mlflow ui; yield their base URLs; always stop both."""
    dagster_port, mlflow_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="ui-screenshots-") as tmp:
        log_dir = Path(tmp)
        dagster = Server(
            "dagster-webserver",
            [str(VENV_BIN / "dagster-webserver"), "-m", "dagster_project.definitions"]
            + ["-h", "127.0.0.1", "-p", str(dagster_port)],
            f"http://127.0.0.1:{dagster_port}/server_info",
            log_dir,
            env,
        )
        mlflow = Server(
            "mlflow-ui",
            [str(VENV_BIN / "mlflow"), "ui", "--backend-store-uri", f"sqlite:///{MLFLOW_DB}"]
            + ["--host", "127.0.0.1", "--port", str(mlflow_port), "--workers", "1"],
            f"http://127.0.0.1:{mlflow_port}/health",
            log_dir,
            env,
        )
        started = time.monotonic()
        try:
            dagster.start()
            mlflow.start()
            deadline = time.monotonic() + timeout
            dagster.wait_ready(deadline)
            mlflow.wait_ready(deadline)
            took = time.monotonic() - started
            print(f"servers up in {took:.0f}s: dagster-webserver :{dagster_port}, mlflow ui :{mlflow_port}")
            yield f"http://127.0.0.1:{dagster_port}", f"http://127.0.0.1:{mlflow_port}"
        finally:
            for server in (dagster, mlflow):
                server.stop()


def graphql(base: str, query: str, timeout: float) -> dict[str, Any]:
    """The ``data`` of a Dagster GraphQL query."""
    request = urllib.request.Request(
        f"{base}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            body = json.load(resp)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ScreenshotError(f"Dagster GraphQL at {base}: {exc}") from exc
    if body.get("errors"):
        raise ScreenshotError(f"Dagster GraphQL error: {body['errors']}")
    return body["data"]


def wait_settled(page: Any, timeout: float, selector: str = "", quiet_s: float = 1.5) -> None:
    """Wait until the page's text and the boxes of ``selector`` stop changing for ``quiet_s`` seconds."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        current = page.evaluate(FINGERPRINT_JS, selector)
        if current != last:
            last, since = current, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)
    print(f"warning: {page.url} still changing after {timeout:.0f}s; taking the screenshot anyway")


def graph_scale(page: Any) -> float:
    """The zoom of the Dagster asset graph (the scale of the transform around its SVG)."""
    transform = page.evaluate(
        "() => { const s = document.querySelector('svg[class*=svgContainer]');"
        " return s && s.parentElement ? getComputedStyle(s.parentElement).transform : 'none'; }"
    )
    if not transform.startswith("matrix("):
        return 1.0
    return float(transform[len("matrix(") :].split(",")[0])


def shoot_asset_graph(context: Any, base: str, path: Path, timeout: float) -> bool:
    """The global asset lineage, all groups expanded, sized so the fitted graph shows full nodes."""
    nodes = graphql(base, "{ assetNodes { assetKey { path } } }", timeout)["assetNodes"]
    names = sorted("/".join(node["assetKey"]["path"]) for node in nodes)
    page = context.new_page()
    page.set_viewport_size(GRAPH_VIEWPORT)
    page.goto(f"{base}/asset-groups", wait_until="networkidle")
    svg = page.locator("svg[class*=svgContainer]")
    svg.wait_for()
    # Expand every group (Dagster's Alt+E shortcut) with the focus on the graph's background.
    area = page.locator("[data-svg-viewport]")
    box = area.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 20, box["y"] + box["height"] - 20)
    page.keyboard.press("Alt+KeyE")
    try:
        page.wait_for_url("**expanded=**", timeout=15_000)
    except PlaywrightTimeoutError:
        print("note: the asset graph kept no expanded groups (a single group?)")
    page.wait_for_load_state("networkidle")
    # Grow the viewport so that fitting the graph to it lands at DAGSTER_TARGET_SCALE, then reload:
    # the graph is fitted to the window on load and the expanded groups are kept in the URL.
    width, height = float(svg.get_attribute("width") or 0), float(svg.get_attribute("height") or 0)
    box = area.bounding_box()
    assert box is not None and width > 0 and height > 0
    pad = 48
    viewport = {
        "width": int(GRAPH_VIEWPORT["width"] - box["width"] + width * DAGSTER_TARGET_SCALE + pad),
        "height": int(GRAPH_VIEWPORT["height"] - box["height"] + height * DAGSTER_TARGET_SCALE + pad),
    }
    viewport = {
        "width": max(GRAPH_VIEWPORT["width"], min(MAX_VIEWPORT_SIDE, viewport["width"])),
        "height": max(GRAPH_MIN_HEIGHT, min(MAX_VIEWPORT_SIDE, viewport["height"])),
    }
    page.set_viewport_size(viewport)
    page.reload(wait_until="networkidle")
    svg.wait_for()
    scale = graph_scale(page)
    if scale < DAGSTER_MINIMAL_SCALE:
        print(f"warning: asset graph zoom {scale:.2f} < {DAGSTER_MINIMAL_SCALE}: nodes drawn simplified")
    # Each node's status row reads "Loading..." until its live data (materializations, checks) arrives.
    short_names = [name.split("/")[-1] for name in names] if scale >= DAGSTER_MINIMAL_SCALE else []
    try:
        page.wait_for_function(GRAPH_LOADED_JS, arg=short_names, polling=250, timeout=timeout * 1000)
    except PlaywrightTimeoutError:
        text = svg.text_content() or ""
        missing = [name for name in short_names if name not in text]
        print(f"warning: asset graph not fully loaded (missing: {', '.join(missing) or 'none'})")
    wait_settled(page, timeout)
    page.screenshot(path=str(path))
    print(
        f"saved {path} ({viewport['width']}x{viewport['height']}, zoom {scale:.2f}, "
        f"{len(names)} assets: {', '.join(names)})"
    )
    page.close()
    return True


def shoot_latest_run(context: Any, base: str, path: Path, timeout: float) -> bool:
    """The run page of the newest Dagster run; False when the instance has no runs."""
    data = graphql(
        base, "{ runsOrError(limit: 1) { __typename ... on Runs { results { runId status } } } }", timeout
    )
    runs = data["runsOrError"].get("results") or []
    if not runs:
        print(f"skipped {path}: no Dagster runs in DAGSTER_HOME={os.environ['DAGSTER_HOME']}")
        return False
    run_id, status = runs[0]["runId"], runs[0]["status"]
    page = context.new_page()
    page.set_viewport_size(RUN_VIEWPORT)
    page.goto(f"{base}/runs/{run_id}", wait_until="networkidle")
    page.get_by_text(run_id[:8], exact=True).first.wait_for()
    page.locator("[class*=chart-element]").first.wait_for()
    wait_settled(page, timeout, "[class*=chart-element]")
    page.screenshot(path=str(path))
    print(f"saved {path} (run {run_id}, {status})")
    page.close()
    return True


def latest_dagrpo_run() -> Any | None:
    """The newest MLflow run tagged ``orchestra.recipe = dagrpo``, or None."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{MLFLOW_DB}")
    experiment_ids = [exp.experiment_id for exp in client.search_experiments()]
    if not experiment_ids:
        return None
    runs = client.search_runs(
        experiment_ids,
        filter_string="tags.`orchestra.recipe` = 'dagrpo'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def shoot_mlflow_run(context: Any, base: str, path: Path, timeout: float) -> bool:
    """The Model metrics tab of the newest dagrpo run, filtered to its reward charts."""
    if not MLFLOW_DB.exists():
        print(f"skipped {path}: {MLFLOW_DB} does not exist")
        return False
    run = latest_dagrpo_run()
    if run is None:
        print(f"skipped {path}: no MLflow run tagged orchestra.recipe = dagrpo")
        return False
    metrics = sorted(run.data.metrics)
    search = next((s for s in ("rewards/", "reward") if any(s in key for key in metrics)), "")
    if not search:
        print(f"warning: run {run.info.run_id} logged no reward metrics; showing all its charts")
    page = context.new_page()
    page.set_viewport_size(MLFLOW_VIEWPORT)
    url = (
        f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}/model-metrics"
        "?workflowType=machine_learning"
    )
    page.goto(url, wait_until="networkidle")
    box = page.get_by_placeholder("Search metric charts")
    box.wait_for()
    cards = page.locator(MLFLOW_CARD)
    shown = [key for key in metrics if search.lower() in key.lower()]
    if search:
        box.fill(search)
        try:  # the filter applies after a short debounce
            page.wait_for_function(
                "([css, n]) => document.querySelectorAll(css).length == n",
                arg=[MLFLOW_CARD, len(shown)],
                polling=250,
                timeout=30_000,
            )
        except PlaywrightTimeoutError:
            print(f"warning: the filter {search!r} shows {cards.count()} charts, not {len(shown)}")
    cards.first.wait_for()
    # Charts render only once scrolled into view: make the window tall enough for all of them.
    boxes = [card.bounding_box() for card in cards.all()]
    bottom = max(b["y"] + b["height"] for b in boxes if b is not None)
    height = max(MLFLOW_VIEWPORT["height"], min(MAX_VIEWPORT_SIDE, int(bottom) + 40))
    page.set_viewport_size({"width": MLFLOW_VIEWPORT["width"], "height": height})
    expected = cards.count()
    deadline = time.monotonic() + timeout
    while page.locator(f"{MLFLOW_CARD} .js-plotly-plot .trace").count() < expected:
        if time.monotonic() > deadline:
            print("warning: not every chart rendered in time")
            break
        time.sleep(0.25)
    wait_settled(page, timeout, f"{MLFLOW_CARD} .trace")
    page.mouse.move(1, height - 1)  # no hover tooltip over a chart
    page.screenshot(path=str(path))
    print(f"saved {path} (run {run.info.run_id}, {expected} charts: {', '.join(shown)})")
    page.close()
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--out", type=Path, default=None, help="folder for the PNGs (default: docs/ of the repository)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds to wait for each server and each page (default: 180)",
    )
    args = parser.parse_args(argv)
    out = (args.out or REPO / "docs").resolve()

    env = server_env()
    os.environ.update(env)  # the MLflow client in this process too
    started = time.monotonic()
    saved = 0
    try:
        chromium = find_chromium()
        if sync_playwright is None:
            raise ScreenshotError(
                f"the Python package playwright is missing: pip install '{PLAYWRIGHT_REQUIREMENT}' "
                "(no `playwright install`: the system chromium is used)"
            )
        out.mkdir(parents=True, exist_ok=True)
        with servers(args.timeout, env) as (dagster_url, mlflow_url), sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--disable-gpu"])
            try:
                context = browser.new_context(viewport=GRAPH_VIEWPORT, device_scale_factor=1)
                context.set_default_timeout(args.timeout * 1000)
                context.add_init_script(INIT_SCRIPT)
                shots = (
                    (shoot_asset_graph, dagster_url, "dagster_asset_graph.png"),
                    (shoot_latest_run, dagster_url, "dagster_latest_run.png"),
                    (shoot_mlflow_run, mlflow_url, "mlflow_dagrpo_run.png"),
                )
                for shoot, base, name in shots:
                    shot_started = time.monotonic()
                    if shoot(context, base, out / name, args.timeout):
                        saved += 1
                        print(f"  ({time.monotonic() - shot_started:.0f}s)")
            except PlaywrightError as exc:
                raise ScreenshotError(f"browser: {exc}") from exc
            finally:
                browser.close()
    except ScreenshotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(f"RESULT screenshots={saved}")
        return 1
    print(f"took {time.monotonic() - started:.0f}s")
    print(f"RESULT screenshots={saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
