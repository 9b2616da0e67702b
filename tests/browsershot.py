"""Test helper: screenshot a page in headless Chromium through the DevTools protocol.

``chromium --screenshot`` shoots at the load event, before a bokeh server page has
received its document over the websocket, so the page is driven with CDP instead: navigate,
wait until bokeh has views (``Bokeh.index``), then capture.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from tornado.websocket import websocket_connect

_RENDERED_JS = "(window.Bokeh && Bokeh.index && Object.keys(Bokeh.index).length) || 0"


def find_chromium() -> str | None:
    """Path of a Chromium-like browser, or ``None``."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


async def _shoot(
    browser: str, url: str, out: Path, width: int, height: int, timeout: float, settle: float
) -> int:
    profile = tempfile.mkdtemp(prefix="dparallel-chromium-")
    proc = subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         "--remote-debugging-address=127.0.0.1", f"--window-size={width},{height}",
         "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{browser} did not open its DevTools port")
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        ws = await websocket_connect(page["webSocketDebuggerUrl"], max_message_size=256 << 20)
        counter = 0

        async def call(method: str, **params: object) -> dict:
            nonlocal counter
            counter += 1
            ident = counter
            await ws.write_message(json.dumps({"id": ident, "method": method, "params": params}))
            while True:
                raw = await asyncio.wait_for(ws.read_message(), max(deadline - time.monotonic(), 1))
                if raw is None:
                    raise RuntimeError("DevTools connection closed")
                msg = json.loads(raw)
                if msg.get("id") == ident:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    return msg["result"]

        await call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        await call("Page.navigate", url=url)
        views = 0
        while not views:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: no bokeh views after {timeout} s")
            await asyncio.sleep(0.2)
            result = await call("Runtime.evaluate", expression=_RENDERED_JS, returnByValue=True)
            views = int(result["result"].get("value") or 0)
        await asyncio.sleep(settle)  # let the periodic callback draw the data once more
        shot = await call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
        ws.close()
        return views
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(profile, ignore_errors=True)


def screenshot_bokeh_page(
    browser: str,
    url: str,
    out: Path,
    *,
    width: int = 1280,
    height: int = 900,
    timeout: float = 60,
    settle: float = 1.5,
) -> int:
    """Load ``url``, wait until bokeh rendered, save a PNG; returns the number of views."""
    return asyncio.run(_shoot(browser, url, out, width, height, timeout, settle))
