"""`steer serve` on a tiny random model: the API's records equal `steer transfer`'s, requests that
arrive together share one batch and each gets its own records, a full queue answers 503, bad input a
one-line 4xx while the server keeps serving, and the page works in a real headless Chromium."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from steer.cli import cli
from tests.conftest import FORMAL

FIELDS: dict[str, Any] = {"top_k": "10%", "max_new_tokens": 5}
CLI_FIELDS = ["--top-k", "10%", "--max-new-tokens", "5"]
CHROMIUM = Path("/usr/bin/chromium")
LOCAL = "http://127.0.0.1"  # a Host the server answers (others are refused: DNS rebinding)


@pytest.fixture
def probed(prof: Path) -> Path:
    built = CliRunner().invoke(cli, ["probe", str(prof), "--top", "16", "--allow-no-heldout", "-q"])
    assert built.exit_code == 0, built.output
    return prof


def _app(prof: Path, **limits: Any) -> Any:
    from steer.rewriting.opened import OpenedProfile
    from steer.serve.app import ServeLimits, create_app

    opened = OpenedProfile.open(prof)
    return create_app(opened, opened.load_model(), ServeLimits(**limits))


@pytest.fixture
def client(probed: Path) -> Iterator[TestClient]:
    with TestClient(_app(probed), base_url=LOCAL) as c:
        yield c


def _cli_records(prof: Path, out: Path, texts: list[str], *extra: str) -> list[dict[str, Any]]:
    args = ["transfer", "-p", str(prof), "--from", "formal", "--to", "informal", *CLI_FIELDS, *extra]
    result = CliRunner().invoke(cli, [*args, "-q", "-o", str(out), *texts])
    assert result.exit_code == 0, result.output
    return [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]


def _ask(client: TestClient, texts: list[str], **extra: Any) -> Any:
    return client.post("/v1/rewrite", json={"texts": texts, "from": "formal", "to": "informal", **FIELDS, **extra})


def test_the_api_answers_the_records_of_steer_transfer(tmp_path: Path, probed: Path, client: TestClient) -> None:
    texts = FORMAL[:3]
    want = _cli_records(probed, tmp_path / "default.jsonl", texts)  # a probe: steer-and-rerank by default
    got = _ask(client, texts)
    assert got.status_code == 200 and got.json()["records"] == want
    kept = _cli_records(probed, tmp_path / "kept.jsonl", texts[:1], "--preset", "rerank", "--keep-candidates")
    got = _ask(client, texts[:1], preset="rerank", candidates=True)
    assert got.json()["records"] == kept and kept[0]["rerank"]["candidates"]
    # the plain prompt takes no neuron options: refused as `steer transfer` refuses them, not ignored
    ignored = _ask(client, texts[:2], preset="prompt")
    assert ignored.status_code == 400 and "`top_k` '10%' has no effect here" in ignored.json()["error"]
    out = tmp_path / "plain.jsonl"
    plain_args = ["transfer", "-p", str(probed), "--from", "formal", "--to", "informal", "--max-new-tokens", "5"]
    assert CliRunner().invoke(cli, [*plain_args, "--preset", "prompt", "-q", "-o", str(out), *texts[:2]]).exit_code == 0
    plain = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    asked = {"texts": texts[:2], "from": "formal", "to": "informal", "max_new_tokens": 5, "preset": "prompt"}
    assert client.post("/v1/rewrite", json=asked).json()["records"] == plain
    styles = client.get("/v1/styles").json()
    assert styles["styles"] == ["formal", "informal"] and styles["probe"] is True
    assert ["formal", "informal"] in styles["directions"] and "rerank" in styles["presets"]
    assert client.get("/health").json()["status"] == "ok"
    assert "/v1/rewrite" in client.get("/openapi.json").json()["paths"]


def test_requests_that_arrive_together_share_a_batch_and_get_their_own_records(probed: Path) -> None:
    app = _app(probed, max_batch=16)
    server = app.state.server
    with TestClient(app, base_url=LOCAL) as client:
        one = {t: _ask(client, [t]).json()["records"][0] for t in FORMAL[:4]}  # each alone first
        hold, started = threading.Event(), threading.Event()
        decode = server._decode

        def held(key: Any, texts: list[str], interrupted: Any) -> Any:  # the first batch waits for the others
            started.set()
            hold.wait(30)
            return decode(key, texts, interrupted)

        server.batcher.run = held
        before = len(server.batcher.batches)
        with ThreadPoolExecutor(4) as pool:
            first = pool.submit(_ask, client, [FORMAL[0]])
            assert started.wait(30)
            rest = [pool.submit(_ask, client, [t]) for t in FORMAL[1:4]]
            deadline = time.monotonic() + 30
            while server.batcher.queued < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            hold.set()
            answers = [first.result(), *(f.result() for f in rest)]
    assert all(a.status_code == 200 for a in answers)
    assert [a.json()["records"][0] for a in answers] == [one[t] for t in FORMAL[:4]]
    assert server.batcher.batches[before:] == [1, 3]  # the three that waited together: one batch


def test_a_full_queue_answers_503_with_a_retry_hint_and_the_server_recovers(probed: Path) -> None:
    app = _app(probed, max_queue=1)
    server = app.state.server
    with TestClient(app, base_url=LOCAL) as client:
        hold, started = threading.Event(), threading.Event()
        decode = server._decode

        def held(key: Any, texts: list[str], interrupted: Any) -> Any:
            started.set()
            hold.wait(30)
            return decode(key, texts, interrupted)

        server.batcher.run = held
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(_ask, client, [FORMAL[0]])
            assert started.wait(30)
            queued = pool.submit(_ask, client, [FORMAL[1]])
            deadline = time.monotonic() + 30
            while server.batcher.queued < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            full = _ask(client, [FORMAL[2]])
            hold.set()
            assert running.result().status_code == 200 and queued.result().status_code == 200
        assert full.status_code == 503 and full.headers["Retry-After"] == "5"
        assert full.json() == {"error": "the queue is full; retry in 5 s"}
        assert _ask(client, [FORMAL[2]]).status_code == 200


def test_a_request_past_its_timeout_gets_504_and_the_server_keeps_serving(probed: Path) -> None:
    app = _app(probed, timeout_s=0.2)
    server = app.state.server
    with TestClient(app, base_url=LOCAL) as client:
        decode = server._decode

        def slow(key: Any, texts: list[str], interrupted: Any) -> Any:
            time.sleep(0.5)
            return decode(key, texts, interrupted)

        server.batcher.run = slow
        late = _ask(client, [FORMAL[0]])
        assert late.status_code == 504 and "longer than 0.2 s" in late.json()["error"]
        server.batcher.run = decode
        server.limits = type(server.limits)(timeout_s=60)
        assert _ask(client, [FORMAL[0]]).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"texts": ["hi"], "from": "formal", "to": "pirate"}, 400, "style 'pirate' is not in this profile"),
        ({"texts": [], "from": "formal", "to": "informal"}, 400, "`texts` is empty"),
        ({"texts": ["x" * 2001], "from": "formal", "to": "informal"}, 413, "texts[0] has 2001 characters"),
        ({"texts": ["hi"], "from": "formal", "to": "informal", "strenght": 2}, 400, "unknown field 'strenght'"),
        ({"texts": ["hi"], "from": "formal", "to": "informal", "preset": "x"}, 400, "preset 'x' is not one of"),
        ({"texts": ["  "], "from": "formal", "to": "informal"}, 400, "texts[0] is blank"),
        ({"texts": ["hi"] * 65, "from": "formal", "to": "informal"}, 400, "65 texts in one request; send at most 64"),
        ({"texts": [5], "from": "formal", "to": "informal"}, 422, "`texts.0`: Input should be a valid string"),
        ({"texts": ["hi"], "to": "informal"}, 422, "`from` is missing"),
        ({"texts": ["hi"], "from": "formal", "to": "formal"}, 400, "`from` and `to` are both 'formal'"),
        ({"texts": ["hi"], "from": "formal", "to": "informal", "preset": "guided", "candidates": True}, 400,
         "`candidates` keeps rerank candidates; add `preset` rerank"),
    ],
)  # fmt: skip
def test_bad_input_gets_one_line_and_the_server_keeps_serving(
    client: TestClient, tmp_path: Path, body: dict[str, Any], status: int, message: str
) -> None:
    before = sorted(p.name for p in tmp_path.parent.rglob("*") if p.is_file())
    answer = client.post("/v1/rewrite", json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert message in error and "\n" not in error
    assert _ask(client, [FORMAL[0]]).status_code == 200  # still serving
    assert sorted(p.name for p in tmp_path.parent.rglob("*") if p.is_file()) == before  # nothing written


def test_nan_is_refused_in_one_line(client: TestClient) -> None:
    raw = '{"texts": ["hi"], "from": "formal", "to": "informal", "preset": "guided", "strength": NaN}'
    answer = client.post("/v1/rewrite", content=raw, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and "`strength` must be a finite number, got nan" in answer.json()["error"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_page_rewrites_a_sentence_in_a_headless_browser(probed: Path, tmp_path: Path) -> None:
    import uvicorn
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.is_file(), "Debian's chromium is missing: `make test` installs it (apt-get install chromium)"
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(_app(probed), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=flags)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#direction option", state="attached")
            page.select_option("#direction", "formal|informal")
            page.fill("#text", FORMAL[0])
            page.check("#candidates")
            page.click("#go")
            page.wait_for_selector("#candidate-table", timeout=120_000)
            output = page.inner_text("#output")
            rows = page.locator("#candidate-table tbody tr").count()
            chosen = page.locator("#candidate-table tr.chosen").count()
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            page.fill("#text", "")
            page.uncheck("#candidates")
            page.click("#go")
            page.wait_for_function("document.getElementById('error').textContent.length > 0")
            error = page.inner_text("#error")
            browser.close()
    finally:
        server.should_exit = True
        thread.join(30)
    assert output and output != "…"
    assert rows == 5 and chosen == 1  # the default ladder's five rungs, one chosen
    assert "texts[0] is blank" in error
    assert (tmp_path / "page.png").stat().st_size > 1000


def test_at_most_max_services_recipes_stay_loaded_and_an_evicted_one_comes_back_the_same(probed: Path) -> None:
    """A client varying a field per request must not grow the server's memory without bound."""
    from steer.serve.app import MAX_SERVICES

    app = _app(probed)
    server = app.state.server
    with TestClient(app, base_url=LOCAL) as client:
        first = _ask(client, FORMAL[:1], seed=0).json()["records"]
        for seed in range(1, MAX_SERVICES + 3):  # each seed is another recipe, so another service
            assert _ask(client, FORMAL[:1], seed=seed).status_code == 200
            assert len(server.services) == min(seed + 1, MAX_SERVICES)
        kept_seeds = sorted(key[2].settings.seed for key in server.services)
        assert kept_seeds == list(range(3, MAX_SERVICES + 3))  # the most recent ones; seed 0 was evicted
        assert _ask(client, FORMAL[:1], seed=0).json()["records"] == first  # rebuilt, the same records
        assert len(server.services) == MAX_SERVICES


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"prompt": "{text:>99999999}"}, "formats a field ({text:>99999999})"),
        ({"prompt": "{text!r}"}, "formats a field ({text!r})"),
        ({"opening": "{target:^999999}"}, "an opening may hold only plain fields"),
        ({"prompt": "x" * 5000 + "{text}"}, "at most 4000 are allowed"),
        ({"max_new_tokens": 100000}, "`max_new_tokens` 100000 is above this server's limit 256"),
        ({"max_new_tokens": 3.5}, "`max_new_tokens` must be a whole number, got 3.5"),
        ({"max_new_tokens": True}, "`max_new_tokens` must be a whole number, got true"),
        ({"seed": "x"}, "`seed` must be a whole number, got 'x'"),
        ({"top_k": [1]}, "`top_k` must be a single value"),
        ({"batch_size": 500}, "`batch_size` 500 is above this server's limit 16"),
        ({"prompt": "{text} " * 40}, "holds {text} 40 times; a template holds it once"),
        ({"edit_layers": "0-10000000000"}, "names block 10000000000"),
        ({"clean": "false"}, "`clean` must be true or false, got \"false\""),
        ({"prompt": 5}, "`prompt` must be a string, got 5"),
    ],
)  # fmt: skip
def test_a_request_cannot_ask_for_unbounded_work_or_wrong_types(
    client: TestClient, extra: dict[str, Any], message: str
) -> None:
    answer = _ask(client, [FORMAL[0]], preset="guided", **extra)
    assert answer.status_code == 400, answer.text
    assert message in answer.json()["error"] and "\n" not in answer.json()["error"]
    assert client.get("/health").status_code == 200 and _ask(client, [FORMAL[0]]).status_code == 200


def test_a_bad_text_fails_only_its_own_request_and_invisible_texts_are_refused(client: TestClient) -> None:
    lone = client.post(
        "/v1/rewrite",
        content='{"texts": ["hi \\ud800 there"], "from": "formal", "to": "informal"}',
        headers={"Content-Type": "application/json"},
    )
    assert lone.status_code == 400 and "lone surrogate" in lone.json()["error"]
    blank = _ask(client, ["\u200b\u200b"])
    assert blank.status_code == 400 and "only invisible characters" in blank.json()["error"]


def test_a_failing_request_in_a_shared_batch_fails_alone(probed: Path) -> None:
    app = _app(probed, max_batch=16)
    server = app.state.server
    with TestClient(app, base_url=LOCAL) as client:
        good = _ask(client, [FORMAL[1]]).json()["records"][0]
        hold, started = threading.Event(), threading.Event()
        decode = server._decode

        def fragile(key: Any, texts: list[str], interrupted: Any) -> Any:  # a text that breaks its batch
            started.set()
            hold.wait(30)
            if "poison" in " ".join(texts):
                raise RuntimeError("this text cannot be decoded")
            return decode(key, texts, interrupted)

        server.batcher.run = fragile
        with ThreadPoolExecutor(3) as pool:
            first = pool.submit(_ask, client, [FORMAL[0]])
            assert started.wait(30)
            bad, fine = pool.submit(_ask, client, ["poison pill"]), pool.submit(_ask, client, [FORMAL[1]])
            deadline = time.monotonic() + 30
            while server.batcher.queued < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            hold.set()
            assert first.result().status_code == 200
            assert fine.result().status_code == 200 and fine.result().json()["records"][0] == good
            assert bad.result().status_code == 500
        assert client.get("/health").status_code == 200


def test_a_timed_out_batch_stops_decoding_at_the_next_step(probed: Path) -> None:
    app = _app(probed, timeout_s=0.3)
    server = app.state.server
    steps: list[int] = []
    with TestClient(app, base_url=LOCAL) as client:
        decode = server._decode

        def watched(key: Any, texts: list[str], interrupted: Any) -> Any:
            def slow_check() -> bool:
                steps.append(1)
                time.sleep(0.1)  # each step takes 0.1 s: the request times out after about three
                return interrupted()

            return decode(key, texts, slow_check)

        server.batcher.run = watched
        late = _ask(client, [FORMAL[0]], preset="guided", max_new_tokens=200, min_new_tokens=200)
        assert late.status_code == 504, late.text
        deadline = time.monotonic() + 30
        while (server.batcher.queued or len(steps) < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        done = len(steps)
        time.sleep(0.5)
        assert len(steps) == done < 50  # stopped soon after the timeout, far from 200 tokens
        server.batcher.run = decode
        assert _ask(client, [FORMAL[0]]).status_code == 200


def test_a_foreign_host_and_wrong_paths_get_json_errors(probed: Path) -> None:
    app = _app(probed)
    with TestClient(app, base_url="http://evil.example") as foreign:
        answer = _ask(foreign, [FORMAL[0]])
        assert answer.status_code == 400 and "Host 'evil.example' is not served here" in answer.json()["error"]
        assert foreign.get("/health").status_code == 400
    with TestClient(app, base_url=LOCAL) as client:
        assert client.get("/nowhere").json()["error"].startswith("no such path /nowhere")
        wrong = client.get("/v1/rewrite")
        assert wrong.status_code == 405 and "GET is not allowed" in wrong.json()["error"]
        plain = client.post("/v1/rewrite", content="hello", headers={"Content-Type": "text/plain"})
        assert plain.status_code == 415 and "Content-Type: application/json" in plain.json()["error"]
        assert client.get("/health").status_code == 200
        big = client.post("/v1/rewrite", content="x" * (2 << 20), headers={"Content-Type": "application/json"})
        assert big.status_code == 413 and "at most 1048576" in big.json()["error"]
        raw = '{"texts": ["hi"], "from": "formal", "to": "informal", "\\ud800": 1}'  # a lone surrogate, as JSON
        odd = client.post("/v1/rewrite", content=raw, headers={"Content-Type": "application/json"})
        assert odd.status_code in (400, 422) and "\n" not in odd.json()["error"]  # an error quoting a surrogate renders
        assert client.get("/nowhere").status_code == 404
    for base in ("http://LOCALHOST:8000", "http://localhost.", "http://[::1]:8000"):
        with TestClient(app, base_url=base) as spelled:
            assert spelled.get("/health").status_code == 200, base
    allowed = _app(probed, hosts=("127.0.0.1", "steer.internal"))
    with TestClient(allowed, base_url="http://steer.internal:8000") as named:
        assert named.get("/health").status_code == 200


def test_the_openapi_schema_lists_every_recipe_field_and_every_error(client: TestClient) -> None:
    from dataclasses import fields

    from steer.settings import TransferSettings

    schema = client.get("/openapi.json").json()
    body = schema["components"]["schemas"]["RewriteRequest"]["properties"]
    assert {f.name for f in fields(TransferSettings)} <= set(body)
    assert body["max_new_tokens"]["type"] == "integer" and body["clean"]["type"] == "boolean"
    assert body["mode"]["enum"] == ["prompt", "deactivate", "amplify", "deactivate+amplify", "shift", "trained"]
    answers = schema["paths"]["/v1/rewrite"]["post"]["responses"]
    assert {"400", "404", "405", "411", "413", "415", "422", "500", "503", "504"} <= set(answers)
    assert answers["413"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")


def test_a_batch_that_would_not_fit_in_free_memory_gets_503_before_it_runs(
    probed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import steer.serve.app as app_module

    app = _app(probed)
    server = app.state.server
    with TestClient(app, base_url=LOCAL) as client:
        assert _ask(client, [FORMAL[0]]).status_code == 200
        ran = len(server.batcher.batches)
        monkeypatch.setattr(app_module, "available_bytes", lambda device=None: 1024)
        short = _ask(client, [FORMAL[0], FORMAL[1]])
        assert short.status_code == 503 and short.headers["Retry-After"] == "5", short.text
        assert "would need about" in short.json()["error"] and "is free now" in short.json()["error"]
        assert client.get("/health").status_code == 200
        monkeypatch.setattr(app_module, "available_bytes", lambda device=None: None)  # unknown: never refused
        assert _ask(client, [FORMAL[0]]).status_code == 200 and len(server.batcher.batches) > ran


def test_the_memory_estimate_counts_every_row_a_batch_decodes_together(probed: Path) -> None:
    from steer.model.footprint import batch_bytes, kv_bytes_per_token
    from steer.rewriting.recipe import recipe_for

    app = _app(probed)
    server, config = app.state.server, app.state.server.lm.model.config
    head_dim = config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4
    assert kv_bytes_per_token(config) == per_token
    assert batch_bytes(config, 3, 10) == 3 * (10 * per_token + 4 * config.vocab_size * 4)
    from steer.rewriting.service import service_for

    def need(texts: list[str], **fields: Any) -> int:
        recipe = recipe_for(server.opened, "formal", "informal", preset="prompt", max_new_tokens=5, **fields)
        return server.memory_needed(service_for(server.opened, server.lm, "formal", "informal", recipe), texts)

    one = need([FORMAL[0]])
    assert need([FORMAL[0], FORMAL[0]]) == 2 * one  # two rows
    assert need([FORMAL[0]], guidance=1.0, mode="shift") == 2 * one  # and a guidance row each
    assert need([FORMAL[0] * 3]) > one  # longer texts hold more cache


def test_a_body_sent_in_chunks_is_refused_with_411(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"texts": ["hi"], '
        yield b'"from": "formal", "to": "informal"}'

    answer = client.post("/v1/rewrite", content=chunks(), headers={"Content-Type": "application/json"})
    assert answer.status_code == 411 and "Content-Length" in answer.json()["error"]
    assert client.get("/health").status_code == 200
