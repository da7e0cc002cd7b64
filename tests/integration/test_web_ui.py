"""Approvals sent from the Temporal Web UI, as an operator sends them: a headless Chromium finds the sagas
waiting in the UI's workflow list, opens each one's page and sends the ``approve`` or ``reject`` Update
through the page's "Send an Update" dialog — then the saga, the ledger and the page are judged.

The UI is the one the session stack's ``temporal server start-dev`` serves (UI 2.54). The dialog's
screenshot is written under the test's temporary directory and checked; ``SWITCHYARD_CAPTURE_SCREENSHOTS
=<dir>`` also writes it there (``docs/images`` holds the one docs/operations.md shows), so a test run
leaves the checked-in picture alone unless asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from switchyard import temporal
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.launch import ui_link
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import PHASE_ATTRIBUTE, saga_id
from tests.helpers.browser import chromium, is_png, keep, screenshot, shown
from tests.helpers.live import Live, wait_for_approval
from tests.integration.test_sagas import prepare

UI_TIMEOUT_S = 60
"""Generous: the UI renders in a browser sharing two cores with the stack and another test module."""
WAITING = f'{PHASE_ATTRIBUTE}="awaiting approval"'
SCREENSHOT = "web-ui-approve.png"


def test_sagas_are_approved_and_rejected_from_the_web_ui(
    live: Live, routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    config = live.effective
    approved_app, rejected_app = started(live, routing, stack_config), started(live, routing, stack_config)
    approved, rejected = saga_id([approved_app]), saga_id([rejected_app])
    for saga in (approved, rejected):
        wait_for_approval(live, saga)
    asyncio.run(until_listed(config, {approved, rejected}))  # what the UI's list asks Temporal for

    with chromium() as driver:
        workflows = f"{config.temporal_ui_url}/namespaces/{config.temporal.namespace}/workflows"
        waiting = f"{workflows}?query={quote(WAITING)}"  # the list an operator filters
        driver.get(waiting)
        open_from_list(driver, approved, also_listed=rejected)
        dialog = update_dialog(driver)
        fill(driver, dialog, "approve", {"by": "alice", "reason": "drill window"})
        shot = screenshot(driver, tmp_path / SCREENSHOT)
        assert submit(driver, dialog) == "", "the UI reported the approval refused"

        ended = live.cli("sagas", "show", approved, "--follow")
        assert ended.returncode == 0, ended.stdout + ended.stderr
        assert f"switchover switched: {approved_app}" in ended.stdout
        assert "approved before the block by alice: drill window" in ended.stdout
        shows = ('"outcome": "switched"', "approved before the block by alice: drill window")
        page = saga_page(driver, config, approved, "COMPLETED", *shows)
        assert all(s in page for s in shows), page

        driver.get(waiting)
        open_from_list(driver, rejected)
        dialog = update_dialog(driver)
        fill(driver, dialog, "reject", {"by": " ", "reason": "nobody named"})
        assert "name who decides: by" in submit(driver, dialog)  # the saga's validator, shown in the dialog
        dialog = update_dialog(driver, again=dialog)
        fill(driver, dialog, "reject", {"by": "bob", "reason": "not in this window"})
        assert submit(driver, dialog) == "", "the UI reported the rejection refused"

        ended = live.cli("sagas", "show", rejected, "--follow")
        assert ended.returncode == 8, ended.stdout + ended.stderr
        assert "rejected before the block by bob: not in this window" in ended.stdout
        shows = ("SwitchAbandoned", "rejected before the block by bob: not in this window")
        page = saga_page(driver, config, rejected, "FAILED", *shows)
        assert all(s in page for s in shows), page

    assert is_png(shot), shot
    assert 20_000 < shot.stat().st_size < 5_000_000, shot.stat().st_size
    keep(shot, SCREENSHOT)

    outcomes = asyncio.run(judged(config, approved, rejected))
    assert outcomes == {approved: "switched", rejected: "compensated"}
    assert routing.binding(BindingKey.for_app(approved_app)).cluster == "standby"  # type: ignore[union-attr]
    assert routing.binding(BindingKey.for_app(rejected_app)).cluster == "primary"  # type: ignore[union-attr]
    for saga, event, trail in (
        (approved, "approved", "alice: drill window"),
        (rejected, "rejected", "bob: not in this window"),
    ):
        run = routing.ledger.saga_runs(saga, limit=1)[0]
        assert (event, trail) in {(s.step, s.detail) for s in routing.ledger.saga_steps(run.run_id)}


def started(live: Live, routing: RoutingStore, config: Config) -> str:
    """An application with a link of its own, whose switchover waits for an approval before the block."""
    app, _, link = prepare(live, routing, config, partitions=1)
    done = live.cli("switchover", app, "--link", link, "--approval", "before-block", "--reason", "web ui")
    assert done.returncode == 0, done.stdout + done.stderr
    return app


async def until_listed(config: Config, sagas: set[str]) -> None:
    """Until Temporal's visibility store lists ``sagas`` as waiting (it follows the history by a moment)."""
    client = await temporal.connect(config)
    async with asyncio.timeout(UI_TIMEOUT_S):
        while not sagas <= {found.id async for found in client.list_workflows(WAITING)}:
            await asyncio.sleep(0.2)


def wait(driver: WebDriver) -> WebDriverWait[WebDriver]:
    """A wait that looks again when the page re-rendered an element under it."""
    return WebDriverWait(driver, UI_TIMEOUT_S, ignored_exceptions=(StaleElementReferenceException,))


def find(driver: WebDriver, by: str, selector: str, within: WebElement | None = None) -> WebElement:
    """The first displayed element matching, once there is one."""
    found = wait(driver).until(shown(by, selector, within))
    assert isinstance(found, WebElement)
    return found


def reads(by: str, selector: str, text: str) -> Callable[[WebDriver], bool]:
    """A wait condition: a displayed element matching reads ``text``."""

    def read(driver: WebDriver) -> bool:
        found = shown(by, selector)(driver)
        return isinstance(found, WebElement) and found.text.strip() == text

    return read


def open_from_list(driver: WebDriver, saga: str, *, also_listed: str | None = None) -> None:
    """Click ``saga`` in the workflow list on screen (``also_listed`` there too); wait for its page."""
    if also_listed is not None:
        find(driver, By.XPATH, f"//a[normalize-space()='{also_listed}']")
    find(driver, By.XPATH, f"//a[normalize-space()='{saga}']").click()
    wait(driver).until(reads(By.CSS_SELECTOR, "[data-testid=workflow-id-heading]", saga))


def update_dialog(driver: WebDriver, *, again: WebElement | None = None) -> WebElement:
    """More Actions → Send an Update: the dialog it opens. ``again``: a dialog showing an error, cancelled
    first — the error stays on screen until the dialog closes, even through a new submission."""
    if again is not None:
        find(driver, By.CSS_SELECTOR, "[data-testid=cancel-modal-button]", again).click()
        wait(driver).until(lambda _: not again.is_displayed())
    find(driver, By.XPATH, "//button[normalize-space()='More Actions']").click()
    find(driver, By.CSS_SELECTOR, "[data-testid=update-button]").click()
    return find(driver, By.CSS_SELECTOR, "dialog#update-confirmation-modal")


def fill(driver: WebDriver, dialog: WebElement, update: str, data: dict[str, Any]) -> None:
    """Choose ``update`` by name (the UI offers the workflow's own Updates) and type ``data`` as its JSON."""

    def chosen() -> str | None:  # the input is rendered anew when the choice changes: look it up each time
        return dialog.find_element(By.ID, "update-select").get_attribute("value")

    if chosen() != update:
        find(driver, By.CSS_SELECTOR, "[data-testid=update-select-button]", dialog).click()
        find(driver, By.XPATH, f".//li[@role='option'][normalize-space()='{update}']", dialog).click()
    editor = find(driver, By.CSS_SELECTOR, "[role=textbox][aria-label=Data]", dialog)
    editor.click()
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(Keys.DELETE)
    editor.send_keys(json.dumps(data))
    # The editor reformats its JSON when it loses focus, which grows the dialog and moves its buttons: blur
    # it before clicking anything, or the click lands where a button was (outside the dialog, closing it).
    driver.execute_script("document.activeElement.blur()")
    wait(driver).until(lambda _: json.loads(editor.text or "null") == data)
    assert chosen() == update


def submit(driver: WebDriver, dialog: WebElement) -> str:
    """Submit the dialog; "" once it closed (the Update completed), else the error it shows."""

    def error() -> str:
        return "\n".join(
            a.text.strip() for a in dialog.find_elements(By.CSS_SELECTOR, "[role=alert]")
        ).strip()

    assert not error(), f"an earlier error on screen would read as this Update's: {error()}"
    find(driver, By.CSS_SELECTOR, "[data-testid=confirm-modal-button]", dialog).click()
    answer = wait(driver).until(lambda _: not dialog.is_displayed() or error() or False)
    return "" if answer is True else str(answer)


def saga_page(driver: WebDriver, config: Config, saga: str, status: str, *shows: str) -> str:
    """The saga's page (the link ``switchyard sagas show`` prints), once it shows ``status`` and each of
    ``shows`` (the page fills its panels after the status, from the history it loads); its text."""
    driver.get(ui_link(config, saga))
    wait(driver).until(reads(By.CSS_SELECTOR, "[data-testid=workflow-id-heading]", saga))
    wait(driver).until(reads(By.CSS_SELECTOR, "[data-testid=execution-status]", status))
    with contextlib.suppress(TimeoutException):  # the caller's assertions name what is missing
        wait(driver).until(lambda d: all(s in d.find_element(By.TAG_NAME, "body").text for s in shows))
    text = driver.find_element(By.TAG_NAME, "body").text
    assert saga in text
    return text


async def judged(config: Config, approved: str, rejected: str) -> dict[str, str]:
    """Each saga's outcome as Temporal has it, after checking what its history says of the Update that
    decided it: sent from the UI, it carries no identity (the CLI's names the sender's process)."""
    client = await temporal.connect(config)
    for saga, update in ((approved, "approve"), (rejected, "reject")):
        history = await client.get_workflow_handle(saga).fetch_history()
        accepted = [
            e.workflow_execution_update_accepted_event_attributes.accepted_request
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
        ]
        assert [(a.input.name, a.meta.identity) for a in accepted] == [(update, "")]
    switched = await client.get_workflow_handle(approved).result()
    with pytest.raises(WorkflowFailureError) as failed:  # a saga that did not switch fails in Temporal's eyes
        await client.get_workflow_handle(rejected).result()
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError), cause
    return {approved: switched["outcome"], rejected: cause.details[0]["outcome"]}
