"""Browser tests of the chat page at `/` and of the API docs at `/docs`, in headless Debian
chromium driven by Selenium, against the real server and model.

Every wait is on a condition (WebDriverWait, or polling the server), never a fixed sleep.
Chromium runs with a dead proxy for every host but 127.0.0.1, and every request it makes
is recorded, so a page that needs another host fails (and is caught).
"""
import json
import os
import re
import shutil
import tempfile
import time
import urllib.parse

import httpx
import pytest

from conftest import serve

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    SELENIUM_MISSING = None
except ImportError as e:  # reported by the browser fixture, as a failure
    SELENIUM_MISSING = e

CHROMIUM = os.environ.get("SLUICE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("SLUICE_CHROMEDRIVER", "/usr/bin/chromedriver")

# Model output the page must show as text, never run.
HOSTILE = '**bold** <script>window.__pwned=1</script> <img src=x onerror="window.__pwned=2">'


# ------------------------------------------------------------------ browser


@pytest.fixture
def browser():
    """A fresh headless chromium (new profile) that can reach 127.0.0.1 only."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        pytest.fail(
            f"browser tests need {' and '.join(missing)}: "
            "apt-get install chromium chromium-driver"
        )
    if SELENIUM_MISSING is not None:
        pytest.fail(f"browser tests need selenium (pip install selenium): {SELENIUM_MISSING}")
    profile = tempfile.mkdtemp(prefix="sluice-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        # Any host but 127.0.0.1 goes to a dead proxy and fails.
        "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>;127.0.0.1",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.requested = []  # every URL requested so far (see requested_urls)
    try:
        driver.set_window_size(1200, 800)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait(driver, condition, timeout=60, message=""):
    return WebDriverWait(
        driver, timeout, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
    ).until(condition, message)


def requested_urls(driver):
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            driver.requested.append(msg["params"]["request"]["url"])
    return driver.requested


def assert_local_only(driver):
    urls = requested_urls(driver)
    assert urls, "no request was recorded"
    remote = [
        u
        for u in urls
        if urllib.parse.urlsplit(u).scheme in ("http", "https", "ws", "wss")
        and urllib.parse.urlsplit(u).hostname != "127.0.0.1"
    ]
    assert not remote, f"requests to other hosts: {remote}"


def by_id(driver, id_):
    return driver.find_element(By.ID, id_)


def js(driver, script, *args):
    return driver.execute_script(script, *args)


def open_page(driver, url, settings=None, conversations=None, wait_model=True):
    """Loads the page, with the given localStorage contents if any. Answers are greedy
    unless the settings say otherwise, so no assertion depends on a sampled answer."""
    if settings is not None:
        settings = {"temperature": "0", **settings}
    driver.get(url + "/")
    if settings is not None or conversations is not None:
        js(
            driver,
            """localStorage.clear();
            if (arguments[0]) localStorage.setItem('sluice.settings', JSON.stringify(arguments[0]));
            if (arguments[1]) localStorage.setItem('sluice.conversations', JSON.stringify(arguments[1]));""",
            settings,
            conversations,
        )
        driver.refresh()
    if wait_model:
        wait(driver, lambda d: by_id(d, "model-id").text.strip() != "", 30, "no model id")


def patch_fetch(driver, extra):
    """Merges `extra` into the body of every chat request the page sends; records bodies."""
    js(
        driver,
        """const extra = arguments[0];
        const original = window.fetch;
        window.__bodies = [];
        window.fetch = function (url, init) {
          if (String(url).includes('/v1/chat/completions') && init && init.body) {
            const body = Object.assign(JSON.parse(init.body), extra);
            window.__bodies.push(body);
            init = Object.assign({}, init, {body: JSON.stringify(body)});
          }
          return original.call(this, url, init);
        };""",
        extra,
    )


def send(driver, text, enter=False):
    prompt = by_id(driver, "prompt")
    prompt.send_keys(text)
    if enter:
        prompt.send_keys(Keys.ENTER)
    else:
        by_id(driver, "send").click()


def answers(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")


def wait_answer(driver, count, timeout=60):
    """Waits until there are `count` assistant messages and none is streaming."""

    def done(d):
        a = answers(d)
        streaming = d.find_elements(By.CSS_SELECTOR, "#messages .msg.streaming")
        return a[-1] if len(a) == count and not streaming else False

    return wait(driver, done, timeout, f"answer {count} did not finish")


def regex_literal(text):
    """A regex matching exactly `text` (escapes only what llguidance treats as syntax)."""
    return re.sub(r"([\\.*+?()\[\]{}|^$])", r"\\\1", text)


def assert_inert(driver, body, literal):
    """`body` (a rendered .body) shows `literal` as text and created no live markup."""
    assert js(driver, "return window.__pwned") is None
    for tag in ("script", "img", "iframe", "svg", "object", "embed"):
        assert body.find_elements(By.TAG_NAME, tag) == [], f"<{tag}> was rendered"
    assert body.find_elements(By.CSS_SELECTOR, "[onerror], [onload], a[href^='javascript']") == []
    assert literal in body.text
    assert body.find_element(By.TAG_NAME, "strong").text == "bold"
    assert "<strong>bold</strong>" in body.get_attribute("innerHTML")
    # <img src=x> never loaded.
    assert not [u for u in requested_urls(driver) if urllib.parse.urlsplit(u).path == "/x"]


# ------------------------------------------------------------------ server


def metric(base_url, name, **labels):
    """Sum of the samples of `name` whose labels include `labels` (0 if none)."""
    text = httpx.get(base_url + "/metrics", timeout=5).text
    total = 0.0
    for m in re.finditer(rf"^{name}(?:\{{([^}}]*)\}})? (\S+)$", text, re.M):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def poll(condition, timeout, message):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.05)


# ------------------------------------------------------------------ tests


def test_page_loads_offline_and_shows_model(base_url, model, browser):
    res = httpx.get(base_url + "/")
    assert res.status_code == 200
    assert "text/html" in res.headers["content-type"]
    assert "script-src 'self'" in res.headers["content-security-policy"]
    for path, kind in [
        ("/ui/app.js", "javascript"),
        ("/ui/markdown.js", "javascript"),
        ("/ui/style.css", "text/css"),
    ]:
        r = httpx.get(base_url + path)
        assert r.status_code == 200 and kind in r.headers["content-type"], path

    open_page(browser, base_url)
    assert by_id(browser, "model-id").text == model
    assert by_id(browser, "prompt").is_displayed() and by_id(browser, "send").is_displayed()
    assert not by_id(browser, "stop").is_displayed()
    assert_local_only(browser)
    # Nothing was refused by the Content-Security-Policy (no inline script or style).
    logs = [e["message"] for e in browser.get_log("browser")]
    assert not [m for m in logs if "Content Security Policy" in m], logs


def test_streams_an_answer(base_url, browser):
    # Sampled with a seed (typed below), so the answer is the same on every run.
    open_page(browser, base_url, settings={"temperature": ""})
    by_id(browser, "settings-toggle").click()
    wait(browser, lambda d: by_id(d, "settings").is_displayed(), 5)
    by_id(browser, "system-prompt").send_keys("You are a storyteller.")
    by_id(browser, "max-tokens").send_keys("200")
    by_id(browser, "seed").send_keys("7")
    stored = json.loads(js(browser, "return localStorage.getItem('sluice.settings')"))
    assert stored["maxTokens"] == "200" and stored["seed"] == "7"

    patch_fetch(browser, {})
    # Records the streaming answer's text length at every DOM change.
    js(
        browser,
        """window.__lengths = [];
        new MutationObserver(() => {
          const b = document.querySelector('#messages .msg.assistant.streaming .body');
          if (b) window.__lengths.push(b.textContent.length);
        }).observe(document.getElementById('messages'),
                   {subtree: true, childList: true, characterData: true, attributes: true});""",
    )
    send(browser, "Write a long story about a dragon who learns to fly.")
    wait(browser, lambda d: by_id(d, "stop").is_displayed(), 10, "stop not shown")
    assert not by_id(browser, "send").is_displayed()
    answer = wait_answer(browser, 1)

    lengths = js(browser, "return window.__lengths")
    grew = any(0 < a < b for i, a in enumerate(lengths) for b in lengths[i + 1 :])
    assert grew, f"the answer did not grow while streaming: {lengths[:20]}"
    assert len(answer.find_element(By.CLASS_NAME, "body").text) > 100
    assert re.fullmatch(r"\d+(\.\d+)? tok/s", by_id(browser, "tps").text)
    assert by_id(browser, "send").is_displayed() and not by_id(browser, "stop").is_displayed()

    [body] = js(browser, "return window.__bodies")
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 200 and body["seed"] == 7
    assert "temperature" not in body and "top_p" not in body
    assert body["messages"][0] == {"role": "system", "content": "You are a storyteller."}
    assert body["messages"][1]["role"] == "user"


def test_stop_ends_the_stream(base_url, browser):
    open_page(browser, base_url, settings={"maxTokens": "900"})
    patch_fetch(browser, {"ignore_eos": True})  # the answer would run for ~900 tokens
    cancelled = metric(base_url, "sluice_requests_total", finish_reason="cancelled")
    send(browser, "Tell me a very long story about a lighthouse keeper.")
    body = wait(
        browser,
        lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant.streaming .body"),
        10,
    )
    wait(browser, lambda d: len(body.text) > 20, 30, "no text streamed")
    by_id(browser, "stop").click()
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, ".msg.streaming"), 10)
    stopped_text = body.text

    # The server saw the connection close: the request was cancelled and its slot freed.
    poll(
        lambda: metric(base_url, "sluice_kv_slots_used") == 0
        and metric(base_url, "sluice_requests_total", finish_reason="cancelled") > cancelled,
        10,
        "the server did not cancel the request",
    )
    assert body.text == stopped_text, "the answer grew after stop"
    assert len(stopped_text) > 20
    assert by_id(browser, "send").is_displayed() and not by_id(browser, "stop").is_displayed()
    # The partial answer is kept.
    [conv] = json.loads(js(browser, "return localStorage.getItem('sluice.conversations')"))
    assert conv["messages"][-1]["role"] == "assistant"
    assert len(conv["messages"][-1]["content"]) > 0


def test_model_markup_is_shown_not_run(base_url, browser):
    open_page(browser, base_url, settings={"maxTokens": "200"})
    # The server constrains the model to emit exactly HOSTILE.
    patch_fetch(browser, {"structured_outputs": {"regex": regex_literal(HOSTILE)}})
    send(browser, "Say something.")
    answer = wait_answer(browser, 1)
    body = answer.find_element(By.CLASS_NAME, "body")
    assert_inert(browser, body, '<script>window.__pwned=1</script> <img src=x onerror="window.__pwned=2">')

    # The same from storage, with more attempts, after a reload.
    content = (
        HOSTILE
        + '\n\n<iframe src="javascript:window.__pwned=3"></iframe> <svg onload="window.__pwned=4">'
        + "\n\n[click](javascript:window.__pwned=5) ```<b>x</b>```"
    )
    conv = {
        "id": "hostile",
        "title": "hostile",
        "created": 1,
        "messages": [{"role": "user", "content": "<b>hi</b>"}, {"role": "assistant", "content": content}],
    }
    open_page(browser, base_url, settings={}, conversations=[conv])
    browser.find_element(By.CSS_SELECTOR, "#conversations li[data-id='hostile']").click()
    body = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant .body"))
    assert_inert(browser, body, "<script>window.__pwned=1</script>")
    assert '<iframe src="javascript:window.__pwned=3"></iframe>' in body.text
    assert "[click](javascript:window.__pwned=5)" in body.text
    assert body.find_elements(By.TAG_NAME, "a") == []
    assert body.find_element(By.TAG_NAME, "code").text == "<b>x</b>"
    user = browser.find_element(By.CSS_SELECTOR, ".msg.user")
    assert user.text == "<b>hi</b>" and user.find_elements(By.TAG_NAME, "b") == []


def test_conversations_persist(base_url, browser):
    open_page(browser, base_url, settings={"maxTokens": "16"})
    send(browser, "First question", enter=True)
    wait_answer(browser, 1)
    items = lambda: browser.find_elements(By.CSS_SELECTOR, "#conversations li")  # noqa: E731
    assert [li.find_element(By.CLASS_NAME, "title").text for li in items()] == ["First question"]

    by_id(browser, "new-chat").click()
    assert browser.find_elements(By.CSS_SELECTOR, "#messages .msg") == []
    prompt = by_id(browser, "prompt")
    prompt.send_keys("Second")
    prompt.send_keys(Keys.SHIFT + Keys.ENTER)
    prompt.send_keys("question")
    assert prompt.get_attribute("value") == "Second\nquestion"  # Shift+Enter: a newline
    assert browser.find_elements(By.CSS_SELECTOR, "#messages .msg") == []
    prompt.send_keys(Keys.ENTER)
    wait_answer(browser, 1)
    titles = [li.find_element(By.CLASS_NAME, "title").text for li in items()]
    assert titles == ["Second question", "First question"]

    # Switch back to the first.
    first_id = items()[1].get_attribute("data-id")
    items()[1].click()
    wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".msg.user").text == "First question", 5)
    assert "active" in items()[1].get_attribute("class")
    assert len(answers(browser)) == 1

    # A reload keeps both, and the open one.
    browser.refresh()
    wait(browser, lambda d: len(items()) == 2, 10)
    wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".msg.user").text == "First question", 5)

    # Delete the second; it stays deleted after a reload.
    items()[0].find_element(By.CLASS_NAME, "delete").click()
    wait(browser, lambda d: len(items()) == 1, 5)
    browser.refresh()
    wait(browser, lambda d: len(items()) == 1, 10)
    assert items()[0].get_attribute("data-id") == first_id
    stored = json.loads(js(browser, "return localStorage.getItem('sluice.conversations')"))
    assert [c["title"] for c in stored] == ["First question"]
    assert [m["role"] for m in stored[0]["messages"]] == ["user", "assistant"]


THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def test_thinking_is_shown_folded(browser, tmp_path):
    # A template whose generation prompt opens the thinking, as DeepSeek R1's does: the
    # answer starts inside it, and the budget set on the page ends it.
    template = tmp_path / "thinking.jinja"
    template.write_text(THINKING_TEMPLATE)
    with serve("--chat-template", str(template), "--slots", "2", "--context", "512") as url:
        open_page(browser, url, settings={"maxTokens": "40", "thinkingBudget": "8"})
        # This small model ends its turn right after the thinking: min_tokens makes it
        # answer too.
        patch_fetch(browser, {"min_tokens": 24})
        send(browser, "Is 17 a prime number?")
        answer = wait_answer(browser, 1)
        [body] = js(browser, "return window.__bodies")
        assert body["thinking_token_budget"] == 8
        details = answer.find_element(By.CSS_SELECTOR, "details.thinking")
        assert details.get_attribute("open") is None, "the thinking is folded"
        thought = js(browser, "return arguments[0].querySelector('.thought').textContent", details)
        assert thought.strip(), "the thinking was shown"
        text = answer.find_element(By.CLASS_NAME, "body").text
        assert text.strip() and "think>" not in text and "think>" not in thought
        details.find_element(By.TAG_NAME, "summary").click()
        wait(browser, lambda d: details.get_attribute("open") is not None, 5)
        assert details.find_element(By.CLASS_NAME, "thought").text.strip()

        # Kept with the conversation, folded again after a reload; not sent back.
        stored = json.loads(js(browser, "return localStorage.getItem('sluice.conversations')"))
        assert stored[0]["messages"][1]["reasoning"] == thought
        browser.refresh()
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant details.thinking"), 10)
        again = browser.find_element(By.CSS_SELECTOR, ".msg.assistant details.thinking")
        assert again.get_attribute("open") is None
        patch_fetch(browser, {})
        send(browser, "And 21?")
        wait_answer(browser, 2)
        bodies = js(browser, "return window.__bodies")
        assert all(set(m) == {"role", "content"} for m in bodies[-1]["messages"])


def test_model_picker(browser, tmp_path):
    # Two models: the page offers both, sends the one picked, and keeps the choice.
    models = os.environ.get("SLUICE_MODEL_DIR") or os.path.expanduser("~/.cache/sluice/models")
    model = os.environ.get("SLUICE_MODEL") or os.path.join(
        models, "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    args = ["--model", f"first={model}", "--model", f"second={model}"]
    with serve(*args, "--slots", "2", "--context", "512") as url:
        open_page(browser, url, settings={"maxTokens": "4"}, wait_model=False)
        picker = by_id(browser, "model-picker")
        wait(browser, lambda d: picker.is_displayed(), 30, "no model picker")
        assert not by_id(browser, "model-id").is_displayed()
        options = [o.get_attribute("value") for o in picker.find_elements(By.TAG_NAME, "option")]
        assert options == ["first", "second"]
        assert picker.get_attribute("value") == "first"
        Select(picker).select_by_value("second")
        patch_fetch(browser, {})
        send(browser, "Hello")
        answer = wait_answer(browser, 1)
        assert answer.find_element(By.CLASS_NAME, "body").text.strip()
        [body] = js(browser, "return window.__bodies")
        assert body["model"] == "second"
        browser.refresh()
        picker = by_id(browser, "model-picker")
        wait(browser, lambda d: picker.get_attribute("value") == "second", 30, "choice not kept")


def test_api_key_dialog(model, browser):
    with serve("--api-key", "secret-key", "--slots", "2", "--context", "512") as url:
        assert httpx.get(url + "/v1/models").status_code == 401
        open_page(browser, url, settings={"maxTokens": "16"}, wait_model=False)
        dialog = by_id(browser, "api-key-dialog")
        wait(browser, lambda d: dialog.is_displayed(), 30, "no API key dialog")
        assert "API key" in by_id(browser, "api-key-message").text

        # A wrong key: asked again.
        by_id(browser, "api-key-input").send_keys("wrong")
        by_id(browser, "api-key-save").click()
        wait(browser, lambda d: js(d, "return localStorage.getItem('sluice.apiKey')") == "wrong", 5)
        wait(browser, lambda d: dialog.is_displayed(), 30, "the dialog did not come back")

        by_id(browser, "api-key-input").send_keys("secret-key")
        by_id(browser, "api-key-save").click()
        wait(browser, lambda d: by_id(d, "model-id").text == model, 30, "no model id")
        assert not dialog.is_displayed()
        assert js(browser, "return localStorage.getItem('sluice.apiKey')") == "secret-key"

        send(browser, "Hello!")
        answer = wait_answer(browser, 1)
        assert answer.find_element(By.CLASS_NAME, "body").text.strip() != ""
        assert "error" not in answer.get_attribute("class")


def test_phone_width(base_url, browser):
    long = "x" * 300
    conv = {
        "id": "wide",
        "title": "A rather long conversation title that must be cut " + long,
        "created": 1,
        "messages": [
            {"role": "user", "content": long},
            {
                "role": "assistant",
                "content": f"{long}\n\nhttps://example.com/{long}\n\n```\n{long}\n```\n\n- `{long}`",
            },
        ],
    }
    browser.set_window_size(390, 844)
    open_page(browser, base_url, settings={}, conversations=[conv])
    width = js(browser, "return window.innerWidth")
    assert width <= 400

    def inside(el):
        r = el.rect
        return el.is_displayed() and r["x"] >= 0 and r["x"] + r["width"] <= width + 0.5

    for id_ in ("prompt", "send", "settings-toggle", "sidebar-toggle", "model-id"):
        assert inside(by_id(browser, id_)), id_
    for el in browser.find_elements(By.CSS_SELECTOR, "#messages .msg"):
        assert el.rect["x"] + el.rect["width"] <= width + 0.5
    assert js(browser, "return document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    for sel in ("main", "#messages", "header", "#composer"):
        assert js(browser, f"const e = document.querySelector('{sel}'); return e.scrollWidth <= e.clientWidth"), sel

    # The sidebar hides behind its button.
    assert not by_id(browser, "new-chat").is_displayed()
    by_id(browser, "sidebar-toggle").click()
    wait(browser, lambda d: by_id(d, "new-chat").is_displayed(), 5)
    item = browser.find_element(By.CSS_SELECTOR, "#conversations li[data-id='wide']")
    wait(browser, lambda d: inside(item), 5)
    item.click()
    wait(browser, lambda d: not by_id(d, "new-chat").is_displayed(), 5)

    by_id(browser, "settings-toggle").click()
    for id_ in ("system-prompt", "temperature", "top-p", "max-tokens", "seed"):
        assert inside(by_id(browser, id_)), id_
    assert js(browser, "return document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def test_screenshot(base_url, browser):
    artifacts = os.environ.get("SLUICE_ARTIFACTS", tempfile.gettempdir() + "/sluice-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    browser.set_window_size(1100, 860)
    open_page(browser, base_url, settings={"maxTokens": "150", "seed": "1", "temperature": "0"})
    send(browser, "What is the capital of France? Answer in one sentence.")
    wait_answer(browser, 1)
    by_id(browser, "new-chat").click()
    send(browser, "Write a Python function that reverses a string.")
    wait_answer(browser, 1)
    path = os.path.join(artifacts, "chat-page.png")
    assert browser.save_screenshot(path)
    print(f"screenshot: {path}")


def test_docs_render_offline(base_url, browser):
    browser.get(base_url + "/docs")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock"), 30, "no operations")
    title = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".information-container .title"))
    assert "sluice" in title.text.lower()
    assert_local_only(browser)
