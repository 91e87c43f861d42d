"""The demo page of `seq2seq serve` (GET /), in a real browser: headless Chromium from Debian's package
(`apt-get install chromium`) driven by Playwright for Python, against a real server on a loopback
port. What the page shows must be what the command line prints for the same input.

Without Playwright or Chromium these tests skip, saying why; CI sets SEQ2SEQ_REQUIRE_BROWSER=1, which
makes a missing browser a failure instead. SEQ2SEQ_SCREENSHOTS=DIR saves each page at desktop and
phone width there (docs/serving.md shows them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from seq2seq.cli import cli  # noqa: E402
from seq2seq.inference.generator import load_engine  # noqa: E402
from seq2seq.serve.app import create_app  # noqa: E402
from seq2seq.serve.requests import Limits  # noqa: E402
from test_serve import call, cli_json, image_model, serving  # noqa: E402, F401 - image_model: a fixture
from test_source_kinds import data, models  # noqa: E402, F401 - fixtures: tiny models of every kind

CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium", shutil.which("chromium") or "")
                 if p and Path(p).is_file()), None)
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def browser():
    why = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        why = "Playwright for Python is not installed (pip install playwright)"
    if why is None and CHROMIUM is None:
        why = "Chromium is not installed (apt-get install chromium)"
    if why is not None:
        if os.environ.get("SEQ2SEQ_REQUIRE_BROWSER"):
            pytest.fail(f"SEQ2SEQ_REQUIRE_BROWSER is set but {why}")
        pytest.skip(why)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage",
                                           # a microphone that plays a tone, allowed without asking
                                           "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"])
        yield chromium
        chromium.close()


def open_page(browser, port: int, width: int = 1100):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"http://127.0.0.1:{port}/")
    return page


def screenshot(page, name: str) -> None:
    folder = os.environ.get("SEQ2SEQ_SCREENSHOTS")
    if folder:
        for width, label in ((1100, "desktop"), (390, "phone")):
            page.set_viewport_size({"width": width, "height": 900})
            page.screenshot(path=str(Path(folder) / f"serve-demo-{name}-{label}.png"), full_page=True)
        page.set_viewport_size({"width": 1100, "height": 900})


def result_texts(page) -> list[str]:
    return page.locator("#results > li > .text").all_text_contents()


def wait_for_results(page, n: int) -> None:
    """Until the request the last click made has been answered (the button is enabled again), then
    the page lists n results. (Its CSP allows no eval, so no wait_for_function.)"""
    page.locator("#run:enabled").wait_for()
    assert page.locator("#error").inner_text() == ""
    assert page.locator("#results > li").count() == n


def wait_for_error(page, status: str) -> None:
    page.locator("#error", has_text=re.compile(f"^{status}: ")).wait_for()


def attention_loads(page) -> None:
    page.click("#show-attention")
    image = page.locator("#attention:not(.hidden)")
    image.wait_for()
    page.wait_for_timeout(200)
    assert image.evaluate("img => img.complete && img.naturalWidth") > 100  # a decoded PNG, not a broken image
    assert page.locator("#error").inner_text() == ""


def drop_file(page, path: Path) -> None:
    """Drop `path` on the page's file area, as a person dragging it from their desktop would."""
    import base64

    transfer = page.evaluate_handle(
        """([name, data]) => {
            const transfer = new DataTransfer();
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            transfer.items.add(new File([bytes], name, { type: "image/png" }));
            return transfer;
        }""", [path.name, base64.b64encode(path.read_bytes()).decode()])
    page.dispatch_event("#file-input", "drop", {"dataTransfer": transfer})


def decode_a_file_as_the_command_line_does(page, button: str, path: Path, preview: str, expected: str,
                                          name: str) -> None:
    """Choose the file, see its preview, click `button`: the one result is `expected`; the attention loads."""
    page.wait_for_selector("#form:not(.hidden)")
    assert page.locator("#run").inner_text() == button
    page.set_input_files("#file", str(path))
    page.wait_for_selector(f"{preview}:not(.hidden)")
    page.click("#run")
    wait_for_results(page, 1)
    assert result_texts(page) == [expected]
    attention_loads(page)
    screenshot(page, name)


def test_a_text_model_translates_what_the_command_line_translates(browser, tiny_model_dir):
    lines = ["A dog runs.", "", "Two men talk in the park."]
    expected = [obj["text"] for obj in cli_json(tiny_model_dir, lines, "--beam", "3")]
    model = load_engine(tiny_model_dir, device="cpu")
    with serving(create_app(model, Limits(max_chars=60))) as (port, _):
        page = open_page(browser, port)
        page.wait_for_selector("#form:not(.hidden)")
        assert page.locator("#model").inner_text() == Path(tiny_model_dir).name
        assert "text model" in page.locator("#meta").inner_text()
        page.select_option("#strategy", "beam")
        page.fill("#opt-beam", "3")
        page.fill("#source", "\n".join(lines))
        page.click("#run")
        wait_for_results(page, 3)
        assert result_texts(page) == expected
        assert page.locator("#status").inner_text().endswith(" ms")
        attention_loads(page)
        screenshot(page, "text")
        page.fill("#source", "x" * 61)  # over --max-chars: the API's 413, shown as its message
        page.click("#run")
        wait_for_error(page, "413")
        assert page.locator("#error").inner_text() == "413: texts[0] has 61 characters; the limit is 60"
        page.fill("#source", "A dog runs.")
        page.select_option("#strategy", "greedy")
        page.fill("#opt-min_len", "-1")  # refused by the same rules as the command line: 422
        page.click("#run")
        wait_for_error(page, "422")
        page.keyboard.press("Tab")  # the page is usable from the keyboard: focus moves on
        page.close()


def test_the_page_steers_every_line_as_json_input_does_and_shows_warnings(browser, tiny_model_dir):
    lines = ["A dog runs.", "Two men talk in the park."]
    steering = {"prefix": "Ein", "constraints": ["Mann", "Frau"], "avoid": ["Hund"]}
    expected = [obj["text"] for obj in cli_json(tiny_model_dir, [json.dumps({"text": t, **steering}) for t in lines],
                                                "--json-input", "--beam", "3")]
    assert all(t.startswith("Ein") and "Mann" in t and "Hund" not in t for t in expected)
    with serving(create_app(load_engine(tiny_model_dir, device="cpu"))) as (port, _):
        page = open_page(browser, port)
        page.wait_for_selector("#steering:not(.hidden)")
        assert page.locator("#terms-mode").is_hidden()  # the model takes no terms on its sources
        page.fill("#opt-beam", "3")
        page.fill("#source", "\n".join(lines))
        page.fill("#prefix", "Ein")
        page.fill("#constraints", "Mann; Frau")
        page.fill("#avoid", " Hund ;")
        page.click("#run")
        wait_for_results(page, 2)
        assert result_texts(page) == expected
        page.fill("#prefix", "")
        page.fill("#avoid", "")
        page.fill("#constraints", "Hund Hund Hund Hund")  # cannot fit: translated without it, and said so
        page.fill("#opt-max_len_a", "0")
        page.fill("#opt-max_len_b", "3")
        page.click("#run")
        wait_for_results(page, 2)
        assert page.locator("#results > li .warning").all_text_contents() == [
            "its constraints cannot all be met within its length limit; translated without them"] * 2
        page.close()


def test_a_terms_model_takes_the_terms_mode_and_the_annotated_terms_bonus(browser, term_model):
    lines = ["A man in a red shirt.", "Two dogs play."]
    expected = [obj["text"] for obj in cli_json(term_model, [json.dumps({"text": t, "constraints": ["Schnee"]})
                                                             for t in lines],
                                                "--json-input", "--greedy", "--terms", "annotate", "--term-bias", "30")]
    assert all("Schnee" in t for t in expected)
    with serving(create_app(load_engine(term_model, device="cpu"))) as (port, _):
        page = open_page(browser, port)
        page.wait_for_selector("#terms-mode:not(.hidden)")
        assert page.locator("#opt-term_bias").is_hidden()  # a bonus for annotated terms only
        page.select_option("#terms", "annotate")
        page.fill("#opt-term_bias", "30")
        page.select_option("#strategy", "greedy")
        assert page.locator("#opt-term_bias").is_visible()  # whatever the search strategy
        page.fill("#source", "\n".join(lines))
        page.fill("#constraints", "Schnee")
        page.click("#run")
        wait_for_results(page, 2)
        assert result_texts(page) == expected
        page.close()


def test_an_image_model_captions_an_upload_and_shows_the_apis_errors(browser, image_model, tmp_path):
    image = image_model / "img" / "1.png"
    expected = json.loads(CliRunner().invoke(cli, ["caption", str(image_model / "model"), str(image),
                                                   "--json"]).stdout)["text"]
    model = load_engine(image_model / "model", device="cpu")
    with serving(create_app(model, Limits(max_pixels=32 * 32))) as (port, _):
        page = open_page(browser, port)
        decode_a_file_as_the_command_line_does(page, "Caption", image, "#preview", expected, "image")
        others = [image_model / "img" / f"{i}.png" for i in (2, 3)]
        printed = CliRunner().invoke(cli, ["caption", str(image_model / "model"), *map(str, others), "--json"]).stdout
        several = [json.loads(line)["text"] for line in printed.splitlines()]
        page.set_input_files("#file", [str(p) for p in others])  # several files: one result each, in order
        page.click("#run")
        wait_for_results(page, 2)
        assert result_texts(page) == several
        drop_file(page, image)  # dropped on the page: what it shows is what it sends
        page.click("#run")
        wait_for_results(page, 1)
        assert result_texts(page) == [expected]
        junk = tmp_path / "junk.png"
        junk.write_bytes(b"not a picture at all" * 20)
        page.set_input_files("#file", str(junk))
        page.click("#run")
        wait_for_error(page, "422")
        assert "cannot read the uploaded file" in page.locator("#error").inner_text()
        big = tmp_path / "big.png"
        from PIL import Image

        Image.new("RGB", (40, 40), (200, 30, 30)).save(big)
        page.set_input_files("#file", str(big))
        page.click("#run")
        wait_for_error(page, "413")
        assert page.locator("#error").inner_text() == ("413: the uploaded file has 40x40 pixels (0.0 megapixels); "
                                                       "the limit is 1024 (0.001024 megapixels)")
        page.close()


def test_an_audio_model_transcribes_an_upload(browser, models, data):
    model_dir = models("audio")
    wav = data / "wav" / "2.wav"
    expected = json.loads(CliRunner().invoke(cli, ["transcribe", str(model_dir), str(wav), "--json"]).stdout)["text"]
    with serving(create_app(load_engine(model_dir, device="cpu"))) as (port, _):
        page = open_page(browser, port)
        decode_a_file_as_the_command_line_does(page, "Transcribe", wav, "#player", expected, "audio")
        page.click("#record")  # the microphone, recorded and sent as a WAV file the server reads
        page.locator("#record-status", has_text="recording").wait_for()
        page.wait_for_timeout(1200)
        page.click("#record")
        page.locator("#record-status", has_text=re.compile(r"^recorded \d")).wait_for()
        page.click("#run")
        page.locator("#status", has_text=re.compile(r" ms$")).wait_for()
        assert page.locator("#error").inner_text() == "" and page.locator("#results > li").count() == 1
        page.close()


def test_with_an_api_key_the_page_asks_for_it_and_keeps_it_in_the_tab(browser, tiny_model_dir):
    model = load_engine(tiny_model_dir, device="cpu")
    with serving(create_app(model, api_key="s3cret")) as (port, _):
        assert call(port, "GET", "/info")[0] == 401  # the page itself is static; what it reads needs the key
        page = open_page(browser, port, width=390)  # phone width
        page.wait_for_selector("#key-form:not(.hidden)")
        assert page.locator("#error").inner_text().startswith("401")
        page.fill("#key", "s3cret")
        page.press("#key", "Enter")
        page.wait_for_selector("#form:not(.hidden)")
        assert page.evaluate("sessionStorage.getItem('seq2seq-api-key')") == "s3cret"
        assert page.evaluate("localStorage.length") == 0
        page.fill("#source", "A dog runs.")
        page.click("#run")
        wait_for_results(page, 1)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # fits a phone
        page.close()


def test_the_demo_can_be_turned_off_and_adds_nothing_to_the_api(tiny_model_dir):
    model = load_engine(tiny_model_dir, device="cpu")
    with serving(create_app(model, demo=False)) as (port, _):
        assert call(port, "GET", "/")[0] == 404
    with serving(create_app(model)) as (port, _):
        status, info = call(port, "GET", "/info")
        assert status == 200 and info["kind"] == "text" and info["endpoint"] == "/translate"
        from seq2seq.config.search import SEARCH_OPTIONS

        assert [o["name"] for o in info["options"]] == list(SEARCH_OPTIONS)  # the API's own option definitions
        assert call(port, "POST", "/attention", {"text": "A dog.", "beam": 0})[0] == 422  # the API's own checks
        assert call(port, "POST", "/attention", "A dog.", {"Content-Type": "text/plain"})[0] == 415


def test_a_long_recording_shows_its_windows_with_their_times(browser, models, tmp_path):
    import numpy as np

    from test_source_kinds import long_recording

    model_dir = models("audio-max-seconds")  # windows of at most 1 s
    wav = long_recording(tmp_path / "long.wav", 4.0, np.random.default_rng(7))
    printed = CliRunner().invoke(cli, ["transcribe", str(model_dir), str(wav), "--json", "--timestamps"])
    expected = json.loads(printed.stdout)
    assert len(expected["segments"]) > 1
    with serving(create_app(load_engine(model_dir, device="cpu"))) as (port, _):
        page = open_page(browser, port)
        page.wait_for_selector("#form:not(.hidden)")
        page.set_input_files("#file", str(wav))
        page.click("#run")
        wait_for_results(page, 1)
        assert result_texts(page) == [expected["text"]]
        shown = page.locator("#results .segments li").all_text_contents()
        assert shown == [f"[{s['start']:.2f}\u2013{s['end']:.2f} s] {s['text']}" for s in expected["segments"]]
        attention_loads(page)  # drawn over the whole recording, as `transcribe --show-attention` does
        page.close()
        status, body = call(port, "POST", "/generate?timestamps=maybe", wav.read_bytes(), {"Content-Type": "audio/wav"})
        assert (status, body["error"]) == (422, "timestamps must be true or false, got 'maybe'")


def test_timestamps_are_for_recordings_only(image_model):
    with serving(create_app(load_engine(image_model / "model", device="cpu"))) as (port, _):
        image = (image_model / "img" / "1.png").read_bytes()
        status, body = call(port, "POST", "/generate?timestamps=true", image, {"Content-Type": "image/png"})
    assert (status, body["error"]) == (422, "timestamps: only for audio models, not an image model")
