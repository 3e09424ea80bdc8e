#!/usr/bin/env python3
"""Writes the request of each proxy-benchmark case: <case>.headers (one
"Name: value" per line) and <case>.body, into the work directory.

sse256paced is sse256 with the header X-Bench-Paced: 1, which has the
responder send one event per decode step instead of all at once.

claude100k is the Claude Code 2.1.332 turn capture with the headers the client
sent; its last user message is grown with filler words until the body is
100 KB (the capture itself is 87 KB), the model renamed to the benchmark's and
stream set to false so the reply is one JSON message.
"""
import json
import sys

fixtures, work = sys.argv[1], sys.argv[2]
TARGET_BYTES = 100 * 1024
SKIP = {"content-length", "host", "connection", "transfer-encoding", "accept-encoding"}


def write(case, headers, body):
    with open(f"{work}/{case}.headers", "w") as f:
        for name, value in headers:
            f.write(f"{name}: {value}\n")
    with open(f"{work}/{case}.body", "wb") as f:
        f.write(body.encode())


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


write("small", [("Content-Type", "application/json"), ("session-id", "bench-small-0001")],
      compact({"model": "bench", "messages": [{"role": "user", "content": "Say hello."}],
               "max_tokens": 16}))

sse_body = compact({"model": "bench", "messages": [{"role": "user", "content": "Count to 256."}],
                    "max_tokens": 256, "stream": True, "stream_options": {"include_usage": True}})
write("sse256", [("Content-Type", "application/json"), ("session-id", "bench-sse-0001")], sse_body)
write("sse256paced", [("Content-Type", "application/json"), ("session-id", "bench-sse-0002"),
                      ("X-Bench-Paced", "1")], sse_body)

with open(f"{fixtures}/clients/claude-code-2.1.332_messages_turn2.json") as f:
    capture = json.load(f)
body = capture["body"]
body["model"] = "bench"
body["stream"] = False
last = body["messages"][-1]
if isinstance(last["content"], str):
    last["content"] = [{"type": "text", "text": last["content"]}]
last["content"].append({"type": "text", "text": ""})
filler = "lorem ipsum dolor sit amet consectetur adipiscing elit "
grow = TARGET_BYTES - len(compact(body).encode())
text = (filler * (grow // len(filler) + 1))[:grow]
last["content"][-1]["text"] = text
encoded = compact(body)
assert len(encoded.encode()) == TARGET_BYTES, len(encoded.encode())
write("claude100k", [(n, v) for n, v in capture["headers"] if n.lower() not in SKIP], encoded)
