"""A local OpenAI-compatible stub model for recording integration fixtures (``make integrations``).

``POST /v1/chat/completions`` answers by how far the conversation has gone, counting the tool
results in the request: four identical ``search`` calls (a loop), then a ``get_weather`` call,
then a made-up forecast that ignores the weather API's 503 (an ignored error). Usage and ids are
deterministic. Standard library only, so that it runs in every per-library venv.

    python tests/integrations/stub_openai.py PORT
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SEARCH = {"name": "search", "arguments": json.dumps({"query": "Lisbon weather tomorrow"})}
WEATHER = {"name": "get_weather", "arguments": json.dumps({"city": "Lisbon", "day": "tomorrow"})}
ANSWER = "Tomorrow in Lisbon it will be sunny with a high of 24°C."


def reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message for a conversation (OpenAI chat format)."""
    done = sum(1 for m in messages if m.get("role") == "tool")
    if done < 4:
        call = {"id": f"call_{done}", "type": "function", "function": SEARCH}
    elif done == 4:
        call = {"id": "call_4", "type": "function", "function": WEATHER}
    else:
        return {"role": "assistant", "content": ANSWER}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        msg = reply(body.get("messages", []))
        n = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        self._send(200, {
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 1_764_547_200 + n,
            "model": body.get("model", "stub-model"),
            "choices": [{"index": 0, "message": msg,
                         "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 40 + 10 * n, "completion_tokens": 12, "total_tokens": 52 + 10 * n},
        })

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def serve(port: int) -> ThreadingHTTPServer:
    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


if __name__ == "__main__":
    serve(int(sys.argv[1])).serve_forever()
