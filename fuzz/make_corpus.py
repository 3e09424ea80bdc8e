#!/usr/bin/env python3
"""Regenerates the seed corpora under fuzz/corpus/ from real inputs.

    python3 fuzz/make_corpus.py [FIXTURES_DIR]   # default: ../shared/fixtures

Sources:
  identity    the `body` of every client fixture (fixtures/clients/*.json),
              serialised compactly; strings longer than 64 characters cut
              (filler text, except session-bearing fields) and lists kept to
              their first 3 items, so each seed stays a few KB with the
              client's real shape. Prefixed with the target's control byte.
  prometheus  fixtures/vllm/*.txt, as captured.
  usage_tap   vLLM response bodies in OpenAI, Anthropic and Responses shapes
              (the samples of tests/unit/telemetry_stream_samples.h), each
              prefixed with the two cut-point bytes.
  config      docs/lmwarden.example.yaml and a few small variants.
  request_head  every client fixture as a wire request (its method, path and
              header fields in the client's order, Content-Length set to the
              shrunk body's), the first also with a chunked body, plus a
              bodiless HTTP/1.0 GET.

The output is deterministic; rerun after a fixture changes and commit the
result. libFuzzer never writes here: scripts/fuzz.sh fuzzes a copy.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
KEEP_WHOLE = {"user_id", "prompt_cache_key", "session_id", "model", "type", "role"}


def shrink(value, key=None):
    if isinstance(value, dict):
        return {k: shrink(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shrink(v, key) for v in value[:3]]
    if isinstance(value, str) and len(value) > 64 and key not in KEEP_WHOLE:
        return value[:64]
    return value


def write(target, name, data):
    path = CORPUS / target / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def identity_seeds(fixtures):
    clients = sorted((fixtures / "clients").glob("*.json"))
    if not clients:
        sys.exit(f"make_corpus: no client fixtures under {fixtures / 'clients'}")
    for f in clients:
        body = json.dumps(shrink(json.loads(f.read_text())["body"]), ensure_ascii=False,
                          separators=(",", ":")).encode()
        # Control byte (see identity_fuzz.cpp): 0x00 = default session sources,
        # no header; 0x20 = body sources `a.b` and claude-user-id.
        write("identity", f"{f.stem}.bin", b"\x00" + body)
        if f.name.startswith("claude-code"):
            write("identity", f"{f.stem}.claude-user-id.bin", b"\x20" + body)
    # A pinned rank: header length 1 ("3"), honour_client_rank on.
    write("identity", "pinned-rank.bin", b"\x11" + b'3{"model":"m","stream":false}')


def request_head_seeds(fixtures):
    clients = sorted((fixtures / "clients").glob("*.json"))
    for i, f in enumerate(clients):
        capture = json.loads(f.read_text())
        body = json.dumps(shrink(capture["body"]), ensure_ascii=False,
                          separators=(",", ":")).encode()
        head = f"{capture['method']} {capture['path']} HTTP/1.1\r\n"
        for name, value in capture["headers"]:
            if name.lower() != "content-length":
                head += f"{name}: {value}\r\n"
        write("request_head", f"{f.stem}.http",
              (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        if i == 0:
            chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[j:j + 100]), body[j:j + 100])
                               for j in range(0, len(body), 100)) + b"0\r\n\r\n"
            write("request_head", f"{f.stem}.chunked.http",
                  (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked)
    write("request_head", "get-http10.http",
          "GET /v1/models?x=%41 HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n"
          "X-Forwarded-For: 192.0.2.1\r\nx-forwarded-for: 192.0.2.2\r\n\r\n")


def prometheus_seeds(fixtures):
    files = sorted((fixtures / "vllm").glob("*.txt"))
    if not files:
        sys.exit(f"make_corpus: no vLLM fixtures under {fixtures / 'vllm'}")
    for f in files:
        write("prometheus", f.name, f.read_bytes())


def sse(*events):
    out = ""
    for event, data in events:
        if event:
            out += f"event: {event}\n"
        out += "data: " + (data if isinstance(data, str) else
                           json.dumps(data, ensure_ascii=False, separators=(",", ":"))) + "\n\n"
    return out


def chunk(delta, finish=None, usage=None):
    c = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [] if delta is None else
         [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
    return c


def usage_tap_seeds():
    openai_usage = {"prompt_tokens": 1200, "total_tokens": 1250, "completion_tokens": 50,
                    "prompt_tokens_details": {"cached_tokens": 1024}}
    openai_content = [(None, chunk({"role": "assistant", "content": ""})),
                      (None, chunk({"content": 'caf\u00e9 "usage": {"prompt_tokens": 5} \u2713'})),
                      (None, chunk({"content": ""}, "stop"))]
    seeds = {
        "openai-stream-usage.txt": sse(*openai_content, (None, chunk(None, usage=openai_usage)),
                                       (None, "[DONE]")),
        "openai-stream-no-usage.txt": sse(*openai_content, (None, "[DONE]")),
        # The same with CRLF line ends, which event streams may use.
        "openai-stream-crlf.txt": sse(*openai_content, (None, chunk(None, usage=openai_usage)),
                                      (None, "[DONE]")).replace("\n", "\r\n"),
        "openai-json.json": json.dumps(
            {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi \u00e9"},
                          "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 300, "total_tokens": 310, "completion_tokens": 10,
                       "prompt_tokens_details": None}}, ensure_ascii=False),
        "anthropic-stream.txt": sse(
            ("message_start", {"type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "content": [],
                "model": "m", "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 176, "cache_read_input_tokens": 1024,
                          "output_tokens": 0}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("ping", '{"type": "ping"}'),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "Hello \u2713"}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 15}}),
            ("message_stop", {"type": "message_stop"})),
        "anthropic-json.json": json.dumps(
            {"id": "msg_1", "type": "message", "role": "assistant",
             "content": [{"type": "text", "text": "hi"}], "model": "m",
             "stop_reason": "end_turn", "stop_sequence": None,
             "usage": {"input_tokens": 100, "cache_read_input_tokens": 400,
                       "cache_creation_input_tokens": 8, "output_tokens": 7}}),
        "responses-stream.txt": sse(
            ("response.created", {"type": "response.created", "response": {
                "id": "resp_1", "status": "in_progress", "usage": None}}),
            ("response.output_text.delta", {"type": "response.output_text.delta",
                                            "item_id": "msg_1", "delta": "Hi"}),
            ("response.completed", {"type": "response.completed", "response": {
                "id": "resp_1", "status": "completed",
                "output": [{"type": "message",
                            "content": [{"type": "output_text", "text": "Hi"}]}],
                "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 512},
                          "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": 920}}})),
        # A request body, for the stream_options splice.
        "request-stream.json": '{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}',
    }
    # Cut bytes: one seed cut inside the body, the others whole (0, 0).
    for i, (name, body) in enumerate(sorted(seeds.items())):
        cuts = bytes([(37 * i + 11) % 256, (91 * i + 200) % 256]) if i % 2 else b"\x00\x00"
        write("usage_tap", name, cuts + body.encode())


def config_seeds():
    write("config", "lmwarden.example.yaml", (ROOT / "docs" / "lmwarden.example.yaml").read_bytes())
    write("config", "minimal.yaml",
          "models:\n  - name: m\n    backends:\n      - url: http://127.0.0.1:8000\n")
    write("config", "two-models.yaml", """\
listen: "[::1]:0"
threads: 4
limits: {max_header_bytes: 16KiB, max_body_bytes: 1GB, max_connections: 10}
timeouts: {connect: 500ms, first_byte: 1h30m, idle: 90s, client_read: 1m, shutdown_grace: 0s}
retries: 0
admin_token: secret
scrape_interval: 250ms
unhealthy_after: 1
models:
  - name: a
    aliases: [a1, a2]
    affinity: false
    spill_threshold: 3
    session_ttl: 10s
    max_conversations: 5
    session_sources: ["header:session-id", "body:metadata.user_id", claude-user-id]
    honor_client_rank: false
    weights: {in_flight: 0.5, kv_used: 0, live_conversations: 1e-3}
    inject_stream_usage: true
    api_keys_env: [A_KEY, B_KEY]
    backends:
      - url: http://10.0.0.1:8000/v1
        data_parallel_size: 8
        api_key_env: UPSTREAM_KEY
      - {url: "http://host.example:80"}
  - name: b
    backends: [{url: http://127.0.0.1:8001, data_parallel_size: 1024}]
""")
    write("config", "shared-homes.yaml", """\
listen: 127.0.0.1:0
shared_homes:
  redis: redis://user:p%40ss@[::1]:6380/3
  key_prefix: "fleet/"
  timeout: 75ms
models:
  - name: m
    backends:
      - url: http://127.0.0.1:8000
""")
    write("config", "errors.yaml", """\
listen: nowhere
threads: -1
bogus: 1
models:
  - name: m
    aliases: [m]
    spill_threshold: 0
    backends:
      - url: https://x
      - url: http://user:pw@h:99999
        data_parallel_size: 0
  - {name: m, backends: []}
""")


def main():
    fixtures = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "fixtures"
    identity_seeds(fixtures)
    prometheus_seeds(fixtures)
    usage_tap_seeds()
    config_seeds()
    request_head_seeds(fixtures)


if __name__ == "__main__":
    main()
