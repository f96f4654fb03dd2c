"""The official OpenAI Python SDK against replaygate serving HTTPS, trusting its own CA bundle.

Run by tests/it/tls_serve.rs as `openai_sdk_tls.py BASE_URL CA_FILE`: a plain response, a streamed
one and a gated request (422) over TLS, over HTTP/1.1 and over HTTP/2 (httpx with `h2`); a client
without the CA refuses the proxy's certificate.
Exits non-zero with a message on the first expectation that fails.
"""

import ssl
import sys

import openai


def expect(condition, message):
    if not condition:
        print(f"FAILED: {message}", file=sys.stderr)
        sys.exit(1)


def main(base_url, ca_file):
    for http2, version in ((False, "HTTP/1.1"), (True, "HTTP/2")):
        trusting = ssl.create_default_context(cafile=ca_file)
        client = openai.OpenAI(
            base_url=base_url,
            api_key="sk-client-test",
            max_retries=0,
            http_client=openai.DefaultHttpxClient(verify=trusting, http2=http2, timeout=20),
        )
        turns(client, version)

    # Without the CA the proxy's certificate is not trusted: no request goes out.
    stranger = openai.OpenAI(
        base_url=base_url,
        api_key="sk-client-test",
        max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=ssl.create_default_context(), timeout=20),
    )
    try:
        stranger.responses.create(model="gpt-5", input="Say hello.")
        expect(False, "a client without the CA was served")
    except openai.APIConnectionError:
        pass

    print("openai sdk tls: ok")


def turns(client, version):
    """A plain response, a streamed one and a refused one, each over `version`."""
    raw = client.responses.with_raw_response.create(model="gpt-5", input="Say hello.")
    expect(raw.http_response.http_version == version, f"{raw.http_response.http_version} for {version}")
    response = raw.parse()
    expect(response.output_text == "Hello", f"plain output_text: {response.output_text!r}")

    stream = client.responses.create(model="gpt-5", input="Say hello.", stream=True)
    kinds, deltas = [], []
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
    expect(kinds[0] == "response.created" and kinds[-1] == "response.completed", f"events: {kinds}")
    expect("".join(deltas) == "Hello", f"streamed text: {deltas}")

    orphan = [{"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}]
    try:
        client.responses.create(model="gpt-5", input=orphan)
        expect(False, "the gated request was not refused")
    except openai.UnprocessableEntityError as error:
        expect(error.status_code == 422, f"status {error.status_code}")
        expect(error.response.http_version == version, f"{error.response.http_version} for {version}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
