"""Stream one generation and print its text as it arrives, then TTFT and tokens/s (stream.sh runs it).

    python3 local_test/stream_text.py URL BODY_JSON

BODY_JSON is an /invocations body in either schema (TGI or OpenAI). The stream is
read by the package's own client (``EndpointClient.stream``: one SSE parser, both
schemas' events), so this needs a Python where llm_byoc imports: this machine's, or
the image's, where stream.sh runs it inside the server's container (URL
http://127.0.0.1:8080 there). The timing line goes to stderr, so stdout is the text alone.
"""

import json
import sys
import time

from llm_byoc.client import EndpointClient, EndpointError


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: stream_text.py URL BODY_JSON", file=sys.stderr)
        return 2
    url, body = argv
    started = time.monotonic()
    first = last = None
    tokens = 0
    try:
        for event in EndpointClient.local(url).stream(json.loads(body)):
            if event.text or event.token_id is not None:  # the final OpenAI chunk may carry no token
                last = time.monotonic()
                first = first or last
                tokens += 1
            sys.stdout.write(event.text)
            sys.stdout.flush()
    except EndpointError as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    print()
    if first is None:
        print("[no tokens]", file=sys.stderr)
        return 0
    rate = f", {(tokens - 1) / (last - first):.1f} tokens/s after the first" if tokens > 1 and last > first else ""
    print(f"[{tokens} tokens: TTFT {first - started:.3f} s{rate}, {last - started:.2f} s in all]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
