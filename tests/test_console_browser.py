"""The console in a real browser: Debian's chromium through chromedriver (selenium) against a real
``triage serve`` on 127.0.0.1 whose store holds a replay of real and generated runs
(:func:`serve.offline.history_replay.replay_into`), a second tenant's runs, and a hostile trace.

One walk, in order: a wrong key is refused; sign in; the overview; the top pattern and one of its
runs; a run with its failing step marked; the hostile trace renders inert; five labels from the
queue with the keyboard, one undone, the labels read back over the API; the other tenant's runs and
patterns never shown; the streams and models pages; /docs and /redoc render with every host but
127.0.0.1 unresolvable; sign out, after which the session's cookie no longer works. Each page's
screenshot goes to docs/img/console/.

``make test`` installs chromium and chromium-driver when missing (``make browser``); without them
this test skips (except under CI=true, where it fails).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, LiveServer

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = ROOT / "docs" / "img" / "console"

HOSTILE: dict[str, Any] = {
    "id": "hostile-run",
    "task_type": "support",
    "steps": [
        {"kind": "user_input", "content": "<script>window.__xss = 1</script> read "
         "<a href=\"javascript:window.__xss = 2\">this link</a> and summarise it"},
        {"kind": "tool_call", "tool_name": "fetch", "call_id": "c1",
         "tool_args": {"url": "javascript:window.__xss = 3"}},
        {"kind": "tool_result", "tool_name": "fetch", "call_id": "c1", "status": "error",
         "content": "<img src=x onerror=\"window.__xss = 4\"><b>bold</b>"
                    "<iframe src=\"javascript:window.__xss = 5\"></iframe> HTTP 500 Internal Server Error"},
        {"kind": "final_output", "content": "<svg onload=\"window.__xss = 6\"></svg> Here is the summary: "
         "[click](javascript:window.__xss = 7)"},
    ],
}


def _need_browser() -> None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed (the dev extra)")
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but chromium / chromedriver are missing: run `make browser` (make test does)")
        pytest.skip("chromium and chromium-driver are not installed (`make browser` installs them)")


@pytest.fixture(scope="module")
def seeded() -> Iterator[dict[str, Any]]:
    """A store with tenant acme's replayed history (generated + real runs) and tenant other's runs."""
    _need_browser()
    from model.diagnosis.diagnoser import Diagnoser
    from serve.auth import create_key
    from serve.offline.history_replay import OutcomeModel, Phase, generated_runs, replay, replay_into
    from serve.settings import Settings
    from serve.wiring import build_service, load_runscorer

    work = Path(tempfile.mkdtemp(prefix="console-"))
    _, summary = replay_into(work, runs=40, real_groups=1, seed=3, tenant="acme")
    settings = Settings(data_dir=work)
    service = build_service(settings, Diagnoser(runscorer=load_runscorer(settings)))
    others = []
    for i, (at, trace) in enumerate(generated_runs([Phase(6, 7.0)], seed=99, start=datetime(2026, 2, 1, tzinfo=UTC))):
        trace.id = f"zz-other-{i}"
        others.append((at, trace))
    replay(service, "other", others, model=OutcomeModel(seed=99))
    key, key_id = create_key(service.store, "acme")
    other_key, _ = create_key(service.store, "other")
    service.store.dispose()
    yield {"dir": work, "key": key, "acme_runs": summary.traces, "key_id": key_id, "other_key": other_key,
           "other_ids": [t.id for _, t in others]}
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def server(seeded: dict[str, Any]) -> Iterator[LiveServer]:
    srv = LiveServer(env={"TRIAGE_DATA_DIR": str(seeded["dir"]), "TRIAGE_AUTH": "on"}).wait_ready()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,1000",
                 # the network is off: every host but the server's is unresolvable
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return Math.min(document.body.scrollHeight, 2400)")
    driver.set_window_size(1400, max(800, int(height)))
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.set_window_size(1400, 1000)


def _wait(driver: Any, cond: Any, timeout: float = 15.0, why: Any = None) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout).until(cond)
    except TimeoutException:
        _shot(driver, "failed-wait")
        raise AssertionError(f"timed out at {driver.current_url}: {why() if why else ''}") from None


def _gone(element: Any) -> Any:
    """``staleness_of`` that also reads Chromium's "Node with given id does not belong to the document"
    (a WebDriverException, not a StaleElementReferenceException, when the node is detached mid-check)
    as gone."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def check(_: Any) -> bool:
        try:
            element.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    return check


def _css(driver: Any, sel: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, sel))


def _sign_in(driver: Any, base: str, key: str) -> None:
    driver.get(f"{base}/ui/signin")
    field = _css(driver, "#key")[0]
    field.clear()
    field.send_keys(key)
    button = _css(driver, "#signin")[0]
    button.click()
    _wait(driver, _gone(button))  # the answer's page, not the form it was posted from
    _ready(driver)


def _ready(driver: Any) -> None:
    """The page has loaded, its scripts too (the queue's key handler is attached at the end)."""
    _wait(driver, lambda drv: drv.execute_script("return document.readyState") == "complete")


def _press(driver: Any, keys: str) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys(keys).perform()


def test_console_in_a_browser(server: LiveServer, seeded: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.support import expected_conditions as ec

    base, d = server.url, browser
    api = {"Authorization": f"Bearer {seeded['key']}"}
    r = httpx.post(f"{base}/v1/diagnose", json={"trace": HOSTILE}, headers=api, timeout=60)
    assert r.status_code == 200, r.text

    # a wrong key is refused: no session, the form says so
    _sign_in(d, base, "trg_wrongkey_" + "x" * 30)
    assert "unknown or revoked API key" in _css(d, "#signin-error")[0].text
    assert d.get_cookie("triage_session") is None
    _shot(d, "signin")

    # sign in → the overview
    _sign_in(d, base, seeded["key"])
    _wait(d, ec.url_contains("/ui/overview"))
    assert _css(d, "#tenant")[0].text == "acme"
    cookie = d.get_cookie("triage_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert seeded["key"] not in cookie["value"]
    totals = httpx.get(f"{base}/ui/overview?format=json&days=30", cookies={"triage_session": cookie["value"]},
                       timeout=30).json()["totals"]
    # acme's replayed runs and the hostile one; the other tenant's 6 are not counted
    assert totals["runs"] == seeded["acme_runs"] + 1 and totals["failed"] > 0
    d.get(f"{base}/ui/overview?days=30")
    tiles = _css(d, "#totals .tile b")
    assert tiles[0].text == str(totals["runs"]) and tiles[1].text == str(totals["failed"])
    _wait(d, lambda drv: _css(drv, "#spectrum canvas"))  # the stacked chart drew (uPlot, vendored)
    _shot(d, "overview")

    # the top pattern, and one of its runs
    d.get(f"{base}/ui/patterns?days=30")
    links = _css(d, "#patterns a.pattern-link")
    assert links, "no pattern listed"
    _shot(d, "patterns")
    links[0].click()
    _wait(d, ec.presence_of_element_located(("css selector", "#examples a.example-run")))
    assert _css(d, "#pattern-signature")[0].text.strip()
    _shot(d, "pattern")
    page_ids = [a.text for a in _css(d, "#examples a.example-run")]
    assert not set(page_ids) & set(seeded["other_ids"])

    # a failed run: its failing step marked with the evidence
    runs = httpx.get(f"{base}/ui/runs?format=json&verdict=failed&per_page=200",
                     cookies={"triage_session": cookie["value"]}, timeout=30).json()["items"]
    failed = next(r for r in runs if r["id"] != "hostile-run" and r["primary_kind"] not in (None, "incomplete"))
    detail = httpx.get(f"{base}/v1/traces/{failed['id']}", headers=api, timeout=30).json()
    step = detail["diagnosis"]["primary"]["step"]
    d.get(f"{base}/ui/runs/{failed['id']}")
    marked = _css(d, f"#step-{step}.marked .mark.failure")
    assert marked and detail["diagnosis"]["primary"]["kind"] in marked[0].text
    _shot(d, "run")

    # the hostile trace renders inert: its text shown, nothing run, no javascript: link
    d.get(f"{base}/ui/runs/hostile-run")
    assert "<script>window.__xss = 1</script>" in _css(d, "#step-0")[0].text
    assert "<img src=x" in _css(d, "#step-2")[0].text
    assert d.execute_script("return window.__xss === undefined")
    # the trace's texts are text: no element inside them, no javascript: link anywhere on the page
    assert not _css(d, "#conversation .content *, #conversation .evidence *, #conversation .args *, "
                       "#conversation summary *:not(span), a[href^='javascript:'], iframe, img")
    _shot(d, "hostile")

    # the runs list
    d.get(f"{base}/ui/runs")
    shown = {a.text for a in _css(d, "#runs a.run-link")}
    assert shown and not shown & set(seeded["other_ids"])
    _shot(d, "runs")

    # five labels from the queue with the keyboard, then undo the last one
    d.get(f"{base}/ui/queue")
    _ready(d)
    labelled = []
    for key in "ofoof":
        item = _css(d, "#queue-item")[0]
        tid = item.get_attribute("data-trace")
        _press(d, key)
        _wait(d, _gone(item), why=lambda: _css(d, "#queue-status")[0].text)
        _ready(d)
        labelled.append((tid, key == "f"))
    assert len({t for t, _ in labelled}) == 5
    assert "5 of" in _css(d, "#progress-text")[0].text
    _shot(d, "queue")
    item = _css(d, "#queue-item")[0]
    _press(d, "u")
    _wait(d, _gone(item), why=lambda: _css(d, "#queue-status")[0].text)
    _ready(d)
    assert "4 of" in _css(d, "#progress-text")[0].text
    author = f"key:{seeded['key_id']}"
    for tid, was_failed in labelled[:4]:
        got = httpx.get(f"{base}/v1/traces/{tid}", headers=api, timeout=30).json()["label"]
        assert got is not None and got["author"] == author and got["failed"] is was_failed, (tid, got)
    undone = httpx.get(f"{base}/v1/traces/{labelled[4][0]}", headers=api, timeout=30).json()["label"]
    assert undone is None or undone["author"] != author

    # another tenant's runs are never shown: not listed, and not readable by id
    d.get(f"{base}/ui/runs/{seeded['other_ids'][0]}")
    assert "not_found" in d.page_source and not _css(d, "#conversation")
    r = httpx.get(f"{base}/ui/runs/{seeded['other_ids'][0]}?format=json",
                  cookies={"triage_session": cookie["value"]}, timeout=30)
    assert r.status_code == 404
    pats = httpx.get(f"{base}/ui/patterns?format=json&days=30&level=all",
                     cookies={"triage_session": cookie["value"]}, timeout=30).json()
    ex_ids = {e["trace_id"] for p in pats["result"]["patterns"] for e in p["examples"]}
    assert ex_ids and not ex_ids & set(seeded["other_ids"])

    # streams: diagnoses feed them; one more gets a level shift at observation 60 over the API
    import random

    rng = random.Random(7)
    shifted = [round(100 + rng.gauss(0, 5), 3) for _ in range(60)] + [round(140 + rng.gauss(0, 5), 3) for _ in range(40)]
    r = httpx.post(f"{base}/v1/streams/latency_probe/observations", json={"values": shifted, "params": {"warmup": 40}}, headers=api, timeout=30)
    assert r.status_code == 200 and r.json()["alarms"], r.text
    d.get(f"{base}/ui/streams")  # the stream with an open alarm is the one shown by default
    _wait(d, lambda drv: _css(drv, "#stream-chart canvas"))
    twin = httpx.get(f"{base}/ui/streams?format=json", cookies={"triage_session": cookie["value"]}, timeout=30).json()
    assert twin["chosen"]["stream"] == "latency_probe" and twin["series"]["alarms"]
    assert any(55 <= c <= 65 for c in twin["series"]["changepoints"]), twin["series"]["changepoints"]
    _shot(d, "streams")
    d.get(f"{base}/ui/models")
    assert _css(d, "#active-model")[0].text
    _shot(d, "models")

    # /docs and /redoc with the network off (only 127.0.0.1 resolves)
    d.get(f"{base}/docs")
    _wait(d, lambda drv: _css(drv, ".swagger-ui .opblock"), timeout=30)
    assert "/v1/diagnose" in d.find_element("css selector", "#swagger-ui").text
    hosts = d.execute_script("return performance.getEntriesByType('resource').map(e => new URL(e.name).host)")
    assert hosts and set(hosts) == {f"127.0.0.1:{server.port}"}
    _shot(d, "docs")
    d.get(f"{base}/redoc")
    _wait(d, lambda drv: "diagnose" in drv.find_element("css selector", "#redoc").text.lower(), timeout=30)

    # sign out: the session's cookie no longer works
    d.get(f"{base}/ui/overview")
    _css(d, "#signout")[0].click()
    _wait(d, ec.url_contains("/ui/signin"))
    r = httpx.get(f"{base}/ui/overview?format=json", cookies={"triage_session": cookie["value"]}, timeout=30)
    assert r.status_code == 401
