"""A headless Chromium driven by Selenium, for tests that look at a page as a person would.

The browser is Debian's ``chromium`` with its ``chromedriver`` (installed by ``make setup``): Selenium's
own driver download needs the internet, which the testbed does not have, so both paths are given to it.
A missing browser fails the test rather than skipping it, so a machine set up without it cannot pass
silently.

Each browser gets a fresh profile in a temporary directory, and its driver runs in a session of its own:
at exit the driver is asked to quit, and whatever of that session is still alive (a renderer left behind
by a crash, a hung browser) is killed by its process group.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COMMAND_TIMEOUT_S = 90
"""How long one command may wait for the driver's answer (Selenium's default: for ever). One find of an
element waited over 280 s in a fresh clone's suite, until the test's own time-out, which says nothing
of why: failed so, the test shows the driver's log (``chromium``)."""


@contextlib.contextmanager
def chromium(
    width: int = 1400, height: int = 1000, *, page_load_timeout: float = 60
) -> Iterator[webdriver.Chrome]:
    """A headless Chromium with a ``width`` x ``height`` window, quit (and its processes gone) at exit."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: run `make setup` (it installs Debian's chromium and "
            "chromium-driver)",
            pytrace=False,
        )
    with tempfile.TemporaryDirectory(prefix="switchyard-chromium-") as profile:
        options = Options()
        options.binary_location = str(CHROMIUM)
        for argument in (
            "--headless=new",
            "--no-sandbox",  # the tests run as root, where Chromium's sandbox refuses to start
            "--disable-dev-shm-usage",  # /dev/shm is small in containers; a full one crashes renderers
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-extensions",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--lang=en-US",
            f"--window-size={width},{height}",
            f"--user-data-dir={profile}",
        ):
            options.add_argument(argument)
        service = Service(
            executable_path=str(CHROMEDRIVER),
            log_output=str(Path(profile) / "chromedriver.log"),
            popen_kw={"start_new_session": True},
        )
        driver = webdriver.Chrome(options=options, service=service)
        group = service.process.pid  # the session leader: its group holds the browser it starts
        try:
            driver.set_page_load_timeout(page_load_timeout)
            driver.command_executor.client_config.timeout = COMMAND_TIMEOUT_S
            yield driver
        except Exception as failed:  # what the driver saw of the browser meanwhile: its log's end
            failed.add_note(_tail(Path(profile) / "chromedriver.log"))
            raise
        finally:
            try:
                driver.quit()
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)


def _tail(log: Path, lines: int = 40) -> str:
    try:
        kept = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return f"chromedriver's log: unreadable ({exc})"
    return "chromedriver's log, its end:\n" + "\n".join(kept)


def shown(
    by: str, selector: str, within: WebElement | None = None
) -> Callable[[WebDriver], WebElement | bool]:
    """A WebDriverWait condition: the first element matching that is displayed. Pages often keep hidden
    copies of a control (a second layout, a closed menu), so the first match alone may not be the one."""

    def displayed(driver: WebDriver) -> WebElement | bool:
        for element in (within or driver).find_elements(by, selector):
            if element.is_displayed():
                return element
        return False

    return displayed


def screenshot(driver: webdriver.Chrome, path: Path) -> Path:
    """Save what the window shows as a PNG at ``path`` (its folder made if need be), and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not driver.save_screenshot(str(path)):
        raise AssertionError(f"Chromium wrote no screenshot to {path}")
    return path


def is_png(path: Path) -> bool:
    """Whether ``path`` starts with the PNG signature."""
    with path.open("rb") as file:
        return file.read(len(PNG_SIGNATURE)) == PNG_SIGNATURE


def keep(shot: Path, name: str) -> None:
    """Copy a screenshot to ``$SWITCHYARD_CAPTURE_SCREENSHOTS/<name>`` when asked (``docs/images`` holds the
    ones the docs show), so that a plain test run changes no file under version control."""
    if directory := os.environ.get("SWITCHYARD_CAPTURE_SCREENSHOTS"):
        Path(directory).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(directory) / name)
