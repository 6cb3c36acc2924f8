"""The built docs site, seen in a real browser: headless Chromium loads the home page, the
``Trainer`` reference, a search and the examples gallery (its pictures loaded), served by
Python's ``http.server`` on 127.0.0.1.

Chromium is driven through its DevTools protocol over a pipe (``--remote-debugging-pipe``:
JSON messages on file descriptors 3 and 4), so no driver library is needed. The test reads
the text the page renders (``document.body.innerText``, after the scripts ran) and fails on
any console error or uncaught exception. It skips, saying why, where there is no Chromium
(Debian's ``chromium`` package; ``.ci/run`` installs it when it can) or no mkdocs.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DOCS_TOOLS = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


_SHIM = """
import os, sys
commands, replies = os.dup(int(sys.argv[1])), os.dup(int(sys.argv[2]))
os.dup2(commands, 3)
os.dup2(replies, 4)
os.set_inheritable(3, True)  # dup2 onto itself (commands was 3) keeps dup's non-inheritable fd
os.set_inheritable(4, True)
os.execv(sys.argv[3], sys.argv[3:])
"""


class Browser:
    """A headless Chromium and one page in it, driven over the DevTools protocol's pipe."""

    def __init__(self, executable: str, profile: Path) -> None:
        self.log = profile.parent / "chromium.log"
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser reads commands on fd 3 and writes replies and events on fd 4; a small
        # Python shim puts the pipe's ends there and execs it (no preexec_fn, which is unsafe
        # with threads; sh cannot name fds above 9).
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _SHIM,
                str(to_browser_r),
                str(from_browser_w),
                executable,
                "--headless=new",
                "--disable-gpu",
                "--no-sandbox",  # root in a container has no user namespace to sandbox with
                "--no-first-run",
                "--disable-extensions",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
            pass_fds=(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._replies: dict[int, dict] = {}
        self._events: queue.Queue = queue.Queue()
        self._lock = threading.Condition()
        self._next_id = 0
        self.console_errors: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=self.session)

    def _read(self) -> None:
        buffer = b""
        with os.fdopen(self._from_browser, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        with self._lock:
                            self._replies[message["id"]] = message
                            self._lock.notify_all()
                    else:
                        self._event(message)

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            description = details.get("exception", {}).get("description") or details.get("text")
            self.console_errors.append(f"uncaught: {description}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console_errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")

    def send(self, method: str, session: str | None = None, timeout: float = 30, **params) -> dict:
        with self._lock:
            self._next_id += 1
            number = self._next_id
        message = {"id": number, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        try:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"Chromium ended before {method}: {self.log_tail()}") from None
        deadline = time.monotonic() + timeout
        with self._lock:
            while number not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise TimeoutError(f"Chromium did not answer {method}: {self.log_tail()}")
                self._lock.wait(left)
            reply = self._replies.pop(number)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def log_tail(self) -> str:
        """The end of Chromium's standard error, for messages."""
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines[-30:] if "dbus" not in line)

    def evaluate(self, expression: str):
        result = self.send(
            "Runtime.evaluate", session=self.session, expression=expression, returnByValue=True
        )
        return result.get("result", {}).get("value")

    def open(self, url: str, ready: str, timeout: float = 30) -> str:
        """Loads ``url`` and waits until the JavaScript ``ready`` is true; returns the page's text."""
        self.send("Page.navigate", session=self.session, url=url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.evaluate(f"document.readyState === 'complete' && Boolean({ready})"):
                time.sleep(0.3)  # let late scripts report their errors too
                return self.evaluate("document.body.innerText")
            time.sleep(0.1)
        text = self.evaluate("document.body ? document.body.innerText : ''")
        raise AssertionError(f"{url}: not ready ({ready}) after {timeout} s; the page shows:\n{text[:2000]}")

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built with ``mkdocs build --strict``, served on 127.0.0.1 at a free port."""
    missing = [name for name in DOCS_TOOLS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f'the docs tools are not installed ({", ".join(missing)}): pip install -e ".[docs]"')
    if find_browser() is None:
        pytest.skip(
            "no Chromium to load the docs in: install Debian's chromium package "
            "(apt-get install chromium), which .ci/run does where it may"
        )
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-5000:]
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def browser(site, tmp_path):
    chromium = Browser(find_browser(), tmp_path / "profile")
    yield chromium
    chromium.close()


def test_the_home_page_renders(site, browser):
    text = browser.open(f"{site}/", "document.querySelector('.md-content h1')")
    assert "tapefit is TensorFlow 2's tf.GradientTape and a Keras-style training loop" in text
    assert "Getting started" in text and "API reference" in text
    assert browser.evaluate("document.title").startswith("tapefit")
    assert browser.console_errors == []


def test_the_trainer_reference_renders(site, browser):
    ready = "document.getElementById('tapefit.Trainer')"
    text = browser.open(f"{site}/reference/tp/#tapefit.Trainer", ready)
    assert "Trains a model with an optimizer and a loss" in text
    assert "fit(" in text and "resume_from" in text  # the method, its signature and arguments
    assert browser.evaluate("document.getElementById('tapefit.Trainer.fit') !== null")
    assert browser.console_errors == []


def test_a_search_finds_the_trainer(site, browser):
    """Material's search runs ``?q=`` from the address in a web worker and lists the hits."""
    ready = "document.querySelectorAll('.md-search-result__item').length > 0"
    text = browser.open(f"{site}/?q=Trainer", ready, timeout=60)
    links = browser.evaluate(
        "Array.from(document.querySelectorAll('.md-search-result__item a')).map(a => a.href)"
    )
    hits = [link for link in links if "/reference/tp/" in link and link.endswith("#tapefit.Trainer")]
    assert hits, links  # addresses carry ?h=trainer, the word the page highlights
    assert "matching documents" in text
    assert browser.console_errors == []


# Every picture in the page's content has arrived and decoded (an SVG that failed to parse, or a
# missing file, leaves naturalWidth at 0).
_PICTURES_LOADED = (
    "(() => { const images = Array.from(document.querySelectorAll('.md-content img'));"
    " return images.length > 0 && images.every(i => i.complete && i.naturalWidth > 0); })()"
)


def test_the_examples_gallery_shows_every_picture(site, browser):
    text = browser.open(f"{site}/examples/", _PICTURES_LOADED)
    assert "Image classification with a CNN" in text and "A loop of your own" in text
    pictures = browser.evaluate("document.querySelectorAll('.md-content img').length")
    cards = browser.evaluate("document.querySelectorAll('.md-content .grid.cards li').length")
    assert pictures == cards == 8
    assert browser.console_errors == []


def test_an_example_page_shows_its_code_and_curves(site, browser):
    text = browser.open(f"{site}/examples/vae/", _PICTURES_LOADED)
    assert "python -m examples.vae" in text
    assert "self.add_loss(" in text  # the excerpt quoted from examples/vae.py
    assert "--8<--" not in text  # the snippet markers are gone
    width = browser.evaluate("document.querySelector('.md-content img').naturalWidth")
    svg = ET.parse(ROOT / "docs" / "examples" / "vae.svg").getroot()
    assert width == int(svg.get("width"))  # the picture decoded at the SVG's own size
    assert browser.console_errors == []
