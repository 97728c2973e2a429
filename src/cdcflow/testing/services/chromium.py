"""Headless Chromium from Debian's package, for tests that look at a page as a browser shows
it: the document after the browser built it (``--dump-dom``) and a screenshot.

Each call starts a browser with a fresh profile folder (removed afterwards), no sandbox (it
may run as root), no GPU, and none of the background traffic a browser makes by itself.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from cdcflow.testing.services.base import ServiceError, program

#: Flags of every run: headless, nothing fetched but the page.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


class Chromium:
    """Debian's ``chromium``, installed when missing."""

    def __init__(self) -> None:
        self.path = program("chromium", "chromium")

    def _run(self, *args: str, timeout: float = 120.0) -> str:
        profile = Path(tempfile.mkdtemp(prefix="cdcflow-chromium-"))
        try:
            done = subprocess.run(
                [self.path, *FLAGS, f"--user-data-dir={profile}", *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=profile,
            )
        finally:
            shutil.rmtree(profile, ignore_errors=True)
        if done.returncode != 0:
            raise ServiceError(f"chromium {args[-1]} failed: {done.stderr[-2000:]}")
        return done.stdout

    def dom(self, url: str) -> str:
        """The document at ``url`` as the browser built it."""
        return self._run("--virtual-time-budget=3000", "--dump-dom", url)

    def screenshot(self, url: str, path: Path, width: int = 1280, height: int = 900) -> Path:
        """A PNG of the page at ``url``, ``width`` × ``height`` pixels."""
        self._run(
            f"--window-size={width},{height}",
            "--virtual-time-budget=3000",
            f"--screenshot={path.resolve()}",
            url,
        )
        if not path.exists():
            raise ServiceError(f"chromium wrote no screenshot to {path}")
        return path
