"""The console in a real browser: Debian's chromium through chromedriver (selenium) against a real
``triage serve`` on 127.0.0.1 whose store holds a replay of real and generated runs
(:func:`serve.offline.history_replay.replay_into`) for tenant ``local``, a second tenant's runs, and
a hostile trace.

One walk, as a newcomer after ``make run``: ``/`` leads to the sign-in page; a wrong key is refused;
the key ``triage keys local`` printed and stored (what ``make run`` runs) signs in; then every console
page (:data:`PAGES`, the GET routes of ``serve/routers/ui*.py``): the overview and its chart; the
top pattern and one of its runs; a run with its failing step marked and its repair ladder; a run whose
tool call's text is its arguments; the hostile trace renders inert; five labels from the queue with
the keyboard, one undone, the labels read back over the API; the other tenant's runs and patterns
never shown; the streams (with and without change points) and models pages; /docs and /redoc render
with every host but 127.0.0.1 unresolvable; sign out, after which the session's cookie no longer
works. On every page the words are checked (:func:`_check_words`): no "rung 0.", "at none" or
"new 0", and every internal name of :data:`INTERNAL_NAMES` carries a ``title`` or a legend where it
shows.

Each page's screenshot goes to ``build/screenshots/`` (git-ignored), or to the folder
``TRIAGE_SCREENSHOTS_DIR`` names (``make screenshots`` refreshes the committed docs/img/console/).
Without chromium and chromedriver this test skips, naming the install command (``sudo make browser``);
under CI=true it fails instead.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
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
#: Where the screenshots go: a git-ignored folder, unless TRIAGE_SCREENSHOTS_DIR names another
#: (relative to the repository root); `make screenshots` refreshes the committed docs/img/console/.
SHOTS = ROOT / os.environ.get("TRIAGE_SCREENSHOTS_DIR", "build/screenshots")
INSTALL = "sudo make browser (apt-get install chromium chromium-driver)"

#: Internal names a page may show; each must carry a title (its element's) or a legend where it shows.
#: Trace texts (the conversation, evidence) are the caller's words and are not checked.
INTERNAL_NAMES = ["zero-shot", "agent model", "TF-IDF", "length fit", "learner", "_pooled", "_pool", "(pool)",
                  "CUSUM", "cusum", "binseg", "pelt", "ECE", "AUROC", "CV AUROC", "operating point", "margin",
                  "rung", "attempt", "result_of", "retry_of", "uses_result_of", "task_type", "runscore"]
#: How a run's agent was found (GET /v1/agents: source): checked in the Models page's agents table.
AGENT_SOURCES = {"option", "span", "task_type", "inferred", "split"}
#: Words a page must never show (issue 33): a rung as a decimal, an empty list said "at none", a count of 0 after "new".
NEVER = ["rung 0.", "at none", "new 0"]

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

#: A run whose tool call's content is its arguments' text, as the importers keep it (OpenAI messages):
#: the page shows the arguments once.
ARGS_MARK = "Zyzzyva-Oslo-7"
ARGS_RUN: dict[str, Any] = {
    "id": "args-run",
    "task_type": "weather",
    "steps": [
        {"kind": "user_input", "content": "Will it rain where I am tomorrow?"},
        {"kind": "tool_call", "tool_name": "get_forecast", "call_id": "a1",
         "content": json.dumps({"city": ARGS_MARK, "days": 1}),
         "tool_args": {"city": ARGS_MARK, "days": 1}},
        {"kind": "tool_result", "tool_name": "get_forecast", "call_id": "a1", "status": "error",
         "content": "HTTP 503 Service Unavailable"},
        {"kind": "final_output", "content": "Tomorrow will be sunny."},
    ],
}


def _need_browser() -> None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("selenium is not installed (the dev extra: .venv/bin/pip install -e '.[dev]')")
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but chromium / chromedriver are missing: run `{INSTALL}`")
        pytest.skip(f"chromium and chromedriver are not installed: `{INSTALL}` installs them")


def _console_pages() -> set[str]:
    """Every page of the console: the GET routes of serve/routers/ui*.py, and ``/``."""
    from fastapi.routing import APIRoute

    from serve.routers import ui, ui_models, ui_queue, ui_runs

    routers = (ui.home, ui.router, ui_runs.router, ui_queue.router, ui_models.router)
    return {r.path for rt in routers for r in rt.routes if isinstance(r, APIRoute) and "GET" in r.methods}


def _local_key(data_dir: Path) -> str:
    """The key `make run` prints: ``triage keys local`` against the server's data folder."""
    out = subprocess.run([sys.executable, "-m", "serve.cli.main", "keys", "local"], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRIAGE_DATA_DIR": str(data_dir)}).stdout
    got = re.search(r"^API key \(new in (.+)\): (\S+)$", out, flags=re.M)
    assert got is not None, out
    assert Path(got.group(1)) == data_dir / "local.key"
    assert (data_dir / "local.key").read_text(encoding="utf-8").strip() == got.group(2)
    return got.group(2)


@pytest.fixture(scope="module")
def seeded() -> Iterator[dict[str, Any]]:
    """A store with tenant local's replayed history (generated + real runs), tenant other's runs and
    the local key."""
    _need_browser()
    from model.diagnosis.diagnoser import Diagnoser
    from serve.auth import create_key
    from serve.offline.history_replay import OutcomeModel, Phase, generated_runs, replay, replay_into
    from serve.settings import Settings
    from serve.wiring import build_service, load_runscorer

    work = Path(tempfile.mkdtemp(prefix="console-"))
    _, summary = replay_into(work, runs=40, real_groups=1, seed=3, tenant="local")
    settings = Settings(data_dir=work)
    service = build_service(settings, Diagnoser(runscorer=load_runscorer(settings)))
    others = []
    for i, (at, trace) in enumerate(generated_runs([Phase(6, 7.0)], seed=99, start=datetime(2026, 2, 1, tzinfo=UTC))):
        trace.id = f"zz-other-{i}"
        others.append((at, trace))
    replay(service, "other", others, model=OutcomeModel(seed=99))
    other_key, _ = create_key(service.stores.keys, "other")
    service.stores.db.dispose()
    key = _local_key(work)
    yield {"dir": work, "key": key, "local_runs": summary.traces, "other_key": other_key,
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


def _sign_in(driver: Any, key: str) -> None:
    """Fill the sign-in form on the page shown and post it."""
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


#: Each text node (outside trace texts) that holds one of ``names`` as a whole word, and has neither a
#: title on its element nor, inside an element with ``data-legend``, a legend whose ``dt`` names it.
_UNEXPLAINED_JS = r"""
const names = arguments[0], bad = [];
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const res = names.map((n) => [n, new RegExp("(^|[^A-Za-z0-9_-])" + esc(n) + "($|[^A-Za-z0-9_-])")]);
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  const el = n.parentElement;
  // trace texts are the caller's words; a glossary and an SVG <title> are explanations themselves
  if (!el || el.closest("script, style, .conversation, .evidence, .glossary, svg title")) continue;
  for (const [name, re] of res) {
    if (!re.test(n.data) || (el.getAttribute("title") || "").trim()) continue;
    const host = el.closest("[data-legend]");
    const legend = host && document.getElementById(host.dataset.legend);
    if (legend && [...legend.querySelectorAll("dt")].some((dt) => dt.textContent.trim() === name)) continue;
    bad.push(name + " in <" + el.tagName.toLowerCase() + ">: " + n.data.trim().slice(0, 100));
  }
}
return bad;
"""


def _check_words(driver: Any, walked: set[str], route: str) -> str:
    """The page's words (module docstring); returns its text. ``route`` is the page's route, kept in ``walked``."""
    _ready(driver)
    text = driver.find_element("css selector", "body").text
    for never in NEVER:
        assert never not in text, (driver.current_url, never)
    bad = driver.execute_script(_UNEXPLAINED_JS, INTERNAL_NAMES)
    assert not bad, (driver.current_url, bad)
    walked.add(route)
    return str(text)


def _tool_args_once(driver: Any) -> None:
    """No tool call on the page shows its arguments twice (pretty and raw)."""
    for step in _css(driver, ".step.tool_call"):
        shown = []
        for pre in step.find_elements("css selector", "pre.args, pre.content"):
            try:
                shown.append(json.loads(pre.get_attribute("textContent")))
            except ValueError:
                shown.append(pre.get_attribute("textContent").strip())
        assert len(shown) == len({json.dumps(x, sort_keys=True) for x in shown}), (driver.current_url, shown)


def test_console_in_a_browser(server: LiveServer, seeded: dict[str, Any], browser: Any) -> None:
    from selenium.webdriver.support import expected_conditions as ec

    base, d = server.url, browser
    walked: set[str] = set()
    api = {"Authorization": f"Bearer {seeded['key']}"}
    for run in (HOSTILE, ARGS_RUN):
        r = httpx.post(f"{base}/v1/diagnose", json={"trace": run}, headers=api, timeout=60)
        assert r.status_code == 200, r.text

    # the first address a newcomer opens: / → the console → its sign-in page, which names make run's key
    d.get(f"{base}/")
    _wait(d, ec.url_contains("/ui/signin"))
    text = _check_words(d, walked, "/")
    assert "make run" in text and ".triage/local.key" in text and ".venv/bin/triage keys local" in text
    # a wrong key is refused: no session, the form says so
    _sign_in(d, "trg_wrongkey_" + "x" * 30)
    assert "unknown or revoked API key" in _css(d, "#signin-error")[0].text
    assert d.get_cookie("triage_session") is None
    _check_words(d, walked, "/ui/signin")
    _shot(d, "signin")

    # the local key → the overview (the page / asked for)
    _sign_in(d, seeded["key"])
    _wait(d, ec.url_contains("/ui/overview"))
    assert _css(d, "#tenant")[0].text == "local"
    cookie = d.get_cookie("triage_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert seeded["key"] not in cookie["value"]
    jar = {"triage_session": cookie["value"]}
    d.get(f"{base}/ui")
    _wait(d, ec.url_contains("/ui/overview"))
    walked.add("/ui")
    # the chart counts what its axis says (failed runs, once each) over the window the tiles count
    twin = httpx.get(f"{base}/ui/overview?format=json", cookies=jar, timeout=30).json()
    totals, spectrum = twin["totals"], twin["spectrum"]
    # local's replayed runs and the two posted here; the other tenant's 6 are not counted
    assert totals["runs"] == seeded["local_runs"] + 2 and totals["failed"] > 0
    assert sum(sum(v) for v in spectrum["kinds"].values()) == totals["failed"]
    assert len(spectrum["days"]) == 8  # the 7-day window's days, the first and the last partial
    d.get(f"{base}/ui/overview")
    _check_words(d, walked, "/ui/overview")
    tiles = _css(d, "#totals .tile b")
    assert tiles[0].text == str(totals["runs"]) and tiles[1].text == str(totals["failed"])
    _wait(d, lambda drv: _css(drv, "#spectrum canvas"))  # the stacked chart drew (uPlot, vendored)
    # the x axis spans the window: each day's bar in its own slot, the last one not on the right edge
    where = d.execute_script("""
      const el = document.getElementById('spectrum'), u = el.uplot, d = JSON.parse(el.dataset.chart);
      const xs = d.days.map((day) => Date.parse(day + 'T00:00:00Z') / 1000);
      return {width: u.bbox.width / devicePixelRatio, at: xs.map((x) => u.valToPos(x, 'x')),
              label: u.axes[1].label};""")
    slot = where["width"] / len(spectrum["days"])
    assert where["label"] == "failed runs"
    assert all(slot / 2 - 1 <= x <= where["width"] - slot / 2 + 1 for x in where["at"]), where
    _shot(d, "overview")

    # the top pattern, and one of its runs
    d.get(f"{base}/ui/patterns?days=30")
    _check_words(d, walked, "/ui/patterns")
    links = _css(d, "#patterns a.pattern-link")
    assert links, "no pattern listed"
    assert all(re.fullmatch(r"new|[↑↓→] from \d+", td.text) for td in _css(d, "#patterns td.trend"))
    _shot(d, "patterns")
    links[0].click()
    _wait(d, ec.presence_of_element_located(("css selector", "#examples a.example-run")))
    _check_words(d, walked, "/ui/patterns/{pattern_id}")
    assert _css(d, "#pattern-signature")[0].text.strip()
    _shot(d, "pattern")
    page_ids = [a.text for a in _css(d, "#examples a.example-run")]
    assert not set(page_ids) & set(seeded["other_ids"])

    # a failed run with a repair: its failing step marked with the evidence, its ladder in whole rungs
    runs = httpx.get(f"{base}/ui/runs?format=json&verdict=failed&per_page=200", cookies=jar, timeout=30).json()["items"]
    failed = next(r for r in runs if r["id"] not in ("hostile-run", "args-run") and r["repair"]
                  and r["primary_kind"] not in (None, "incomplete"))
    detail = httpx.get(f"{base}/v1/traces/{failed['id']}", headers=api, timeout=30).json()
    step = detail["diagnosis"]["primary"]["step"]
    d.get(f"{base}/ui/runs/{failed['id']}")
    _check_words(d, walked, "/ui/runs/{trace_id}")
    _tool_args_once(d)
    marked = _css(d, f"#step-{step}.marked .mark.failure")
    assert marked and detail["diagnosis"]["primary"]["kind"] in marked[0].text
    rows = [[td.text for td in tr.find_elements("css selector", "td")] for tr in _css(d, "#ladder tbody tr")]
    assert rows and all(row[0].isdigit() and row[1].isdigit() for row in rows), rows
    _shot(d, "run")

    # a tool call whose text is its arguments: shown once
    d.get(f"{base}/ui/runs/args-run")
    _check_words(d, walked, "/ui/runs/{trace_id}")
    _tool_args_once(d)
    assert _css(d, "#step-1")[0].text.count(ARGS_MARK) == 1

    # the hostile trace renders inert: its text shown, nothing run, no javascript: link
    d.get(f"{base}/ui/runs/hostile-run")
    _check_words(d, walked, "/ui/runs/{trace_id}")
    assert "<script>window.__xss = 1</script>" in _css(d, "#step-0")[0].text
    assert "<img src=x" in _css(d, "#step-2")[0].text
    assert d.execute_script("return window.__xss === undefined")
    # the trace's texts are text: no element inside them, no javascript: link anywhere on the page
    assert not _css(d, "#conversation .content *, #conversation .evidence *, #conversation .args *, "
                       "#conversation summary *:not(span), a[href^='javascript:'], iframe, img")
    _shot(d, "hostile")

    # the runs list
    d.get(f"{base}/ui/runs")
    _check_words(d, walked, "/ui/runs")
    shown = {a.text for a in _css(d, "#runs a.run-link")}
    assert shown and not shown & set(seeded["other_ids"])
    _shot(d, "runs")

    # the queue at the run whose tool call's text is its arguments: shown once there too
    queue = httpx.get(f"{base}/ui/queue?format=json", cookies=jar, timeout=30).json()["queue"]
    d.get(f"{base}/ui/queue?at={[q['id'] for q in queue].index('args-run')}")
    _check_words(d, walked, "/ui/queue")
    assert _css(d, "#queue-item")[0].get_attribute("data-trace") == "args-run"
    assert _css(d, "#queue-item")[0].text.count(ARGS_MARK) == 1
    why = _css(d, "#why-asked")[0].text
    assert not re.search(r"\d\.\d{4}", why), why  # figures rounded (3 places), not 0.5208 vs 0.5208

    # five labels from the queue with the keyboard, then undo the last one
    d.get(f"{base}/ui/queue")
    _check_words(d, walked, "/ui/queue")
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
    _check_words(d, walked, "/ui/queue")
    _shot(d, "queue")
    item = _css(d, "#queue-item")[0]
    _press(d, "u")
    _wait(d, _gone(item), why=lambda: _css(d, "#queue-status")[0].text)
    _ready(d)
    assert "4 of" in _css(d, "#progress-text")[0].text
    author = re.search(r"\((key:[^)]+)\)", _css(d, "#progress-text")[0].text)
    assert author is not None
    for tid, was_failed in labelled[:4]:
        got = httpx.get(f"{base}/v1/traces/{tid}", headers=api, timeout=30).json()["label"]
        assert got is not None and got["author"] == author.group(1) and got["failed"] is was_failed, (tid, got)
    undone = httpx.get(f"{base}/v1/traces/{labelled[4][0]}", headers=api, timeout=30).json()["label"]
    assert undone is None or undone["author"] != author.group(1)

    # another tenant's runs are never shown: not listed, and not readable by id
    d.get(f"{base}/ui/runs/{seeded['other_ids'][0]}")
    assert "not_found" in d.page_source and not _css(d, "#conversation")
    r = httpx.get(f"{base}/ui/runs/{seeded['other_ids'][0]}?format=json", cookies=jar, timeout=30)
    assert r.status_code == 404
    pats = httpx.get(f"{base}/ui/patterns?format=json&days=30&level=all", cookies=jar, timeout=30).json()
    ex_ids = {e["trace_id"] for p in pats["result"]["patterns"] for e in p["examples"]}
    assert ex_ids and not ex_ids & set(seeded["other_ids"])

    # streams: diagnoses feed them; one more gets a level shift at observation 60 over the API, and a
    # flat one has no change point
    rng = random.Random(7)
    shifted = [round(100 + rng.gauss(0, 5), 3) for _ in range(60)] + [round(140 + rng.gauss(0, 5), 3) for _ in range(40)]
    r = httpx.post(f"{base}/v1/streams/latency_probe/observations", json={"values": shifted, "params": {"warmup": 40}},
                   headers=api, timeout=30)
    assert r.status_code == 200 and r.json()["alarms"], r.text
    flat = [round(5 + rng.gauss(0, 0.1), 3) for _ in range(50)]
    r = httpx.post(f"{base}/v1/streams/flat_probe/observations", json={"values": flat}, headers=api, timeout=30)
    assert r.status_code == 200, r.text
    d.get(f"{base}/ui/streams?stream=flat_probe&agent=")
    _check_words(d, walked, "/ui/streams")
    assert "no change points (binseg)" in _css(d, "#stream-title")[0].text
    d.get(f"{base}/ui/streams")  # the stream with an open alarm is the one shown by default
    _wait(d, lambda drv: _css(drv, "#stream-chart canvas"))
    _check_words(d, walked, "/ui/streams")
    twin = httpx.get(f"{base}/ui/streams?format=json", cookies=jar, timeout=30).json()
    assert twin["chosen"]["stream"] == "latency_probe" and twin["series"]["alarms"]
    assert any(55 <= c <= 65 for c in twin["series"]["changepoints"]), twin["series"]["changepoints"]
    assert re.search(r"change points? \(binseg\) at observations? \d", _css(d, "#stream-title")[0].text)
    _shot(d, "streams")
    d.get(f"{base}/ui/models")
    _check_words(d, walked, "/ui/models")
    assert _css(d, "#active-model")[0].text
    sources = _css(d, "#agents td.source abbr")
    assert sources and all(a.text in AGENT_SOURCES and a.get_attribute("title") for a in sources)
    _shot(d, "models")
    assert walked == _console_pages(), ("pages not walked", _console_pages() - walked)

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
    r = httpx.get(f"{base}/ui/overview?format=json", cookies=jar, timeout=30)
    assert r.status_code == 401


def test_without_chromium_the_test_skips_naming_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("selenium")
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"`sudo make browser \(apt-get install chromium chromium-driver\)`"):
        _need_browser()
    monkeypatch.setenv("CI", "true")  # CI must run it: there, a missing browser fails
    with pytest.raises(pytest.fail.Exception, match=r"sudo make browser"):
        _need_browser()
