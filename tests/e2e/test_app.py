"""`swiftlike app` as a real process, driven by headless Chromium (the `browser` fixture of conftest.py):
load the page, send a message, watch the reply stream in, and check it is the model's real answer."""
import re
import time

import openai
import pytest
from cli import run_cli
from model_ids import TINY
from servers import free_port, start

from swiftlike.ui.chat import chat_messages
from swiftlike.ui.tool_chat import call_title, offered_tools, text_of
from swiftlike.arguments import parse_args
from swiftlike.arguments.app_args import AppArguments

KEY = "app-key"
MESSAGE = "hello there"
# Records every text the newest reply bubble shows, so the test can tell a streamed reply from one that appears whole.
WATCH_REPLIES = """() => {
  window.__shown = [];
  const chat = document.querySelector('#chat-window');
  new MutationObserver(() => {
    const bots = chat.querySelectorAll('.message.bot, .bot');
    if (bots.length) window.__shown.push(bots[bots.length - 1].innerText);
  }).observe(chat, {subtree: true, childList: true, characterData: true});
}"""


def alnum(text: str) -> str:
    """Letters and digits only: the page renders markdown, so punctuation and spacing may differ from the API's."""
    return re.sub(r"\W|_", "", text)


def test_chat_messages_from_page_history():
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
               {"role": "system", "content": "ignored: the page's own system box decides"}]
    assert chat_messages("next", history, "be brief") == [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"}, {"role": "user", "content": "next"}]
    assert chat_messages("q", [], "  ") == [{"role": "user", "content": "q"}]
    assert text_of({"text": "a", "files": []}) == "a" and text_of(None) == ""


def test_arguments_take_ms_swift_names_and_refuse_what_cannot_work(capsys):
    args = parse_args(AppArguments, ["--api_url", "http://127.0.0.1:8000/v1", "--server_name", "0.0.0.0",
                                     "--server_port", "9000", "--lang", "zh"])
    assert (args.base_url, args.host, args.port, args.lang, args.model) == (
        "http://127.0.0.1:8000/v1", "0.0.0.0", 9000, "zh", None)
    for argv, message in [([], "give --model"), (["--base_url", "127.0.0.1:8000"], "must be an http(s) URL"),
                          (["--model", TINY, "--server_port", "0"], "--port must be in 1..65535")]:
        with pytest.raises(SystemExit):
            parse_args(AppArguments, argv)
        assert message in capsys.readouterr().err


@pytest.fixture(scope="module")
def app_on_model(tmp_path_factory):
    """The page plus the OpenAI API it mounts under /v1, over the vLLM engine; greedy, so replies are checkable."""
    port = free_port()
    log = tmp_path_factory.mktemp("app") / "app.log"
    proc = start(["app", "--model", TINY, "--infer_backend", "vllm", "--torch_dtype", "float32",
                  "--vllm_max_model_len", "1024", "--server_port", str(port), "--temperature", "0",
                  "--max_new_tokens", "48", "--api_key", KEY], port, log)
    yield port
    proc.terminate()
    proc.wait(timeout=90)
    assert "replies" in log.read_text().splitlines()[-1]


def api_reply(port: int) -> str:
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
    r = c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": MESSAGE}], temperature=0,
                                  max_tokens=48)
    return r.choices[0].message.content


def chat_on_page(browser, port: int, expected: str) -> list[str]:
    """Send MESSAGE on the page; return every text the reply bubble showed, the full reply last."""
    page = browser.new_page()
    try:
        page.goto(f"http://127.0.0.1:{port}/", wait_until="load")
        box = page.locator("#chat-input textarea")
        box.wait_for(timeout=60_000)
        page.evaluate(WATCH_REPLIES)
        box.fill(MESSAGE)
        box.press("Enter")
        deadline = time.time() + 90
        while time.time() < deadline:
            shown = page.evaluate("window.__shown")
            if shown and alnum(shown[-1]) == alnum(expected):
                return shown
            time.sleep(0.25)
        raise AssertionError(f"the page never showed the API's reply {expected!r}; last shown: {shown[-1:]!r}")
    finally:
        page.close()


def assert_streamed(shown: list[str]) -> None:
    final = alnum(shown[-1])
    partial = {alnum(s) for s in shown if 0 < len(alnum(s)) < len(final) and final.startswith(alnum(s))}
    assert len(partial) >= 2, f"the reply appeared in {len(partial)} partial steps, not streamed: {shown}"


def test_page_streams_the_models_reply(browser, app_on_model):
    expected = api_reply(app_on_model)
    assert len(alnum(expected)) > 10
    assert_streamed(chat_on_page(browser, app_on_model, expected))


def test_page_over_a_running_endpoint(browser, app_on_model, tmp_path):
    """--base_url: the page answers from another server (here the first app's /v1), with its API key."""
    port = free_port()
    proc = start(["app", "--base_url", f"http://127.0.0.1:{app_on_model}/v1", "--api_key", KEY, "--port", str(port),
                  "--temperature", "0", "--max_new_tokens", "48", "--studio_title", "Remote chat"], port,
                 tmp_path / "app.log", timeout=120)
    try:
        expected = api_reply(app_on_model)
        assert_streamed(chat_on_page(browser, port, expected))
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_api_key_guards_the_api_not_the_page(app_on_model):
    import httpx
    assert httpx.get(f"http://127.0.0.1:{app_on_model}/v1/models").status_code == 401
    assert httpx.get(f"http://127.0.0.1:{app_on_model}/").status_code == 200


def test_a_foreign_host_header_is_refused(app_on_model):
    """DNS rebinding: under a name the app does not answer to, the page and the API it mounts answer 400."""
    import httpx
    url = f"http://127.0.0.1:{app_on_model}"
    for path in ("/", "/v1/models"):
        refused = httpx.get(url + path, headers={"Host": "rebound.example", "Authorization": f"Bearer {KEY}"})
        assert refused.status_code == 400 and "DNS-rebinding" in refused.json()["error"]["message"], path
    assert httpx.get(url + "/", headers={"Host": f"localhost:{app_on_model}"}).status_code == 200
    assert httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_unreachable_base_url_is_a_clear_error():
    r = run_cli("app", "--base_url", f"http://127.0.0.1:{free_port()}/v1", check=False)
    assert r.returncode == 1
    assert "no OpenAI-compatible server answers at --base_url" in r.stderr


TOOL_MESSAGE = "What is 347 * 5821?"
TOOL_MAX_TOKENS = 300  # a forced call, its result and a reply fit the fixture's 1024-token context


def forced_call_seed(port: int) -> tuple[int, str]:
    """A seed under which the random model's forced calculator call closes within TOOL_MAX_TOKENS (constrained
    decoding keeps it well formed, but a random model closes the expression string only by chance), and the
    arguments it writes."""
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
    for seed in range(16):
        answer = c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": TOOL_MESSAGE}],
                                           tools=offered_tools(["calculator"]), tool_choice="required", seed=seed,
                                           temperature=1.0, max_tokens=TOOL_MAX_TOKENS).choices[0]
        if answer.finish_reason == "tool_calls":
            return seed, answer.message.tool_calls[0].function.arguments
    raise AssertionError(f"no seed in 0..15 gave a forced call closed within {TOOL_MAX_TOKENS} tokens")


def test_page_shows_a_tool_call_and_its_result_as_bubbles_of_their_own(browser, app_on_model, tmp_path):
    """Tools ticked, tool_choice required (enforced by vLLM's structured outputs behind the deploy API): the
    page shows the model's calculator call and the calculator's answer as bubbles of their own, then the reply."""
    seed, arguments = forced_call_seed(app_on_model)
    port = free_port()
    proc = start(["app", "--base_url", f"http://127.0.0.1:{app_on_model}/v1", "--api_key", KEY, "--port", str(port),
                  "--temperature", "1", "--max_new_tokens", str(TOOL_MAX_TOKENS)], port, tmp_path / "app.log",
                 timeout=120)
    page = browser.new_page()
    try:
        page.goto(f"http://127.0.0.1:{port}/", wait_until="load")
        box = page.locator("#chat-input textarea")
        box.wait_for(timeout=60_000)
        page.get_by_text("Settings").click()
        page.locator("#chat-tools").get_by_label("calculator").check()
        page.locator("#chat-tool-choice").get_by_label("required").check()
        page.locator("#chat-seed input").fill(str(seed))
        box.fill(TOOL_MESSAGE)
        box.press("Enter")
        chat = page.locator("#chat-window")
        deadline = time.time() + 120
        while time.time() < deadline and "📎 calculator →" not in chat.inner_text():
            time.sleep(0.5)
        shown = chat.inner_text()
        assert "🛠 calculator(" in shown and "📎 calculator →" in shown, shown[-2000:]
        # the call is the one the API gives for the same request and seed (the page sends the same sampling)
        assert alnum(call_title("calculator", arguments)) in alnum(shown), (arguments, shown[-2000:])
    finally:
        page.close()
        proc.terminate()
        proc.wait(timeout=60)
