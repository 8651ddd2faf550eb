"""A loopback OpenAI completions server that streams tokens with set timings, for `make calibrate`.

The timings come from the sizing model itself at known constants (`truth`), so a calibration run
against it must fit those constants back: TTFT = prefill_seconds(prompt tokens), each later token
after decode_step_seconds(streams in flight, context). Listens on 127.0.0.1 only; every request is
bounded by its max_tokens; `close()` stops it.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Optional

from helpers import QuietHTTPServer


class FakeOpenAi:
    def __init__(
        self,
        ttft: Callable[[int], float],
        itl: Callable[[int, float], float],
        fail_after: Optional[int] = None,
        stall_s: float = 0.0,
        token_factor: int = 1,
        error_line: bool = False,
        prompt_factor: int = 1,
    ):
        self.ttft, self.itl, self.fail_after, self.stall_s = ttft, itl, fail_after, stall_s
        self.token_factor, self.error_line, self.prompt_factor = token_factor, error_line, prompt_factor
        self.active = 0
        self.served = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # http.server names it so
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.served += 1
                    failing = fake.fail_after is not None and fake.served > fake.fail_after
                    fake.active += 1
                try:
                    if failing:
                        self.send_response(500)
                        self.end_headers()
                        return
                    prompt_tokens = len(body["prompt"].split())
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    time.sleep(fake.ttft(prompt_tokens) + fake.stall_s)
                    if fake.error_line:
                        error = {"error": {"message": "engine dead", "type": "InternalServerError", "code": 500}}
                        self.wfile.write(f"data: {json.dumps(error)}\n\n".encode())
                    for i in range(int(body["max_tokens"]) * fake.token_factor):
                        if i:
                            with fake.lock:
                                streams = fake.active
                            time.sleep(fake.itl(streams, prompt_tokens + i))
                        chunk = {"choices": [{"index": 0, "text": " tok", "finish_reason": None}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    if (body.get("stream_options") or {}).get("include_usage"):  # as vLLM: choices empty
                        completion = int(body["max_tokens"]) * fake.token_factor
                        usage = {"prompt_tokens": prompt_tokens * fake.prompt_factor, "completion_tokens": completion}
                        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
                    self.wfile.write(b"data: [DONE]\n\n")
                finally:
                    with fake.lock:
                        fake.active -= 1

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)
