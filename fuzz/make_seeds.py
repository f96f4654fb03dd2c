#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora.

Seeds come from tests/fixtures/seed-vectors.json and tests/fixtures/v2-vectors.json, from
generated tool schemas whose `$ref`s would unfold exponentially (each with a call that fails
them), and from bodies whose member names read as gated names.

Seeds for the openai item profile come from tests/fixtures/refusal-vectors.json and every
recorded real-client body in tests/fixtures/corpus/.

gate_check seeds are one byte choosing the provider and policy (selector % 4: 0 bedrock,
1 openai, 2 any, 3 openai with its item profile; selector // 4: policy bits, 1 = unknown_tool
rejected) and the body;
proxy_handle seeds are one byte choosing POST, a path, headers, a blank line and the body;
json_reader seeds are the bodies alone;
ledger_tap seeds are a flags byte (1 an event stream, 2 keep calls, 4 keep items), a chunk size
byte and an answer: the load benchmark's upstream answer as JSON and as an event stream;
judged_prefix seeds are one byte (bit 0 openai, bit 1 its item profile, bits 2-3 what the
ledger knows) and a body: the fixtures' and the corpus's bodies with two or more items;
ws_client_message seeds are six bytes of limits (max_message and the budget's cap, 2 bytes each,
little-endian; the share others hold, in 255ths; the most a read returns) and the frames a
client sends: events whole and in fragments with pings between, masked with a zero mask (so the
dictionary's words apply) and with another, a close, and heads declaring huge lengths.
The seeds are rewritten on every run (fuzz/seeds/ is not committed)."""

import json
import pathlib

FUZZ = pathlib.Path(__file__).resolve().parent
FIXTURES = FUZZ.parent / "tests" / "fixtures"
ANSWER = FUZZ.parent / "bench" / "load" / "response.json"
PROVIDERS = {"bedrock": 0, "openai": 1}
# The gate_check selector of openai with the openai item profile.
PROFILED = 3
PATHS = ["/v1/responses", "/bedrock/v1/responses", "/responses/compact"]
# Policy bits of the gate_check selector (see fuzz_targets/gate_check.rs).
UNKNOWN_TOOL_REJECTED = 1
# Levels of the doubling `$defs` chains: 2^30 subschemas when unfolded.
LEVELS = 30


def fixture_cases():
    """(name, provider, policy bits, body) of every fixture case."""
    for file in ("seed-vectors.json", "v2-vectors.json"):
        stem = file.split("-")[0]
        for case in json.loads((FIXTURES / file).read_text())["cases"]:
            bits = UNKNOWN_TOOL_REJECTED if 'unknown_tool = "reject"' in case.get("config", "") else 0
            yield f"{stem}-{case['name']}", case.get("provider"), bits, case["body"]


def profiled_cases():
    """(name, body) of the refusal vectors and the real-client corpus, for the item profile."""
    for case in json.loads((FIXTURES / "refusal-vectors.json").read_text())["cases"]:
        yield f"refusal-{case['name']}", case["body"]
    for file in sorted((FIXTURES / "corpus").glob("*.jsonl")):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            if isinstance(record.get("body"), dict):
                yield f"corpus-{file.stem}-{record.get('turn', 0)}", record["body"]


def doubling(reference, definition=lambda i, body: body, root=None, keyword="$ref"):
    """A schema whose `$defs` d0..dN each refer to the next twice through `reference(i)`."""
    defs = {}
    for i in range(LEVELS):
        next_ref = reference(i + 1)
        body = {"anyOf": [{keyword: next_ref}, {keyword: next_ref}]}
        defs[f"d{i}"] = definition(i, body)
    defs[f"d{LEVELS}"] = definition(LEVELS, {"type": "string"})
    schema = dict(root or {})
    schema.update({"$defs": defs, "type": "object", "properties": {"x": {keyword: reference(0)}}, "required": ["x"]})
    return schema


def nested(keyword, depth):
    """`keyword` nested `depth` deep, two branches at each level, the innermost a string."""
    schema = {"type": "string"}
    for _ in range(depth):
        schema = {keyword: [schema, {"$ref": "#/$defs/leaf"}]}
    return {"$defs": {"leaf": {"type": "string", "minLength": 2}}, "type": "object", "properties": {"x": schema}}


def schema_shapes():
    """(name, tool schema, failing arguments) of schemas built to unfold past any budget."""
    with_anchor = lambda i, body: {"$anchor": f"a{i}", **body}
    with_dynamic_anchor = lambda i, body: {"$dynamicAnchor": f"a{i}", **body}
    with_id = lambda i, body: {"$id": f"urn:replaygate:d{i}", **body}
    draft4_id = lambda i, body: {"id": f"d{i}.json", **body}
    failing = {"x": 7}
    yield "defs-pointer", doubling(lambda i: f"#/$defs/d{i}"), failing
    yield "defs-percent", doubling(lambda i: f"#/%24defs/d{i}"), failing
    yield "defs-percent-mixed", doubling(lambda i: f"#/%24def%73/d{i}" if i % 2 else f"#/$defs/d{i}"), failing
    yield "defs-anchor", doubling(lambda i: f"#a{i}", with_anchor), failing
    yield "defs-id-urn", doubling(lambda i: f"urn:replaygate:d{i}", with_id, {"$id": "urn:replaygate:root"}), failing
    yield "defs-dynamic-pointer", doubling(lambda i: f"#/$defs/d{i}", keyword="$dynamicRef"), failing
    yield "defs-dynamic-anchor", doubling(lambda i: f"#a{i}", with_dynamic_anchor, keyword="$dynamicRef"), failing
    recursive = {
        "$schema": "https://json-schema.org/draft/2019-09/schema",
        "$recursiveAnchor": True,
        "type": ["object", "integer"],
        "properties": {"x": {"anyOf": [{"$recursiveRef": "#"}, {"$recursiveRef": "#"}]}},
        "additionalProperties": {"$ref": "#/properties/x"},
    }
    yield "recursive-ref", recursive, {"x": {"x": {"x": "deep"}}}
    self_loop = {"anyOf": [{"$ref": "#"}, {"$ref": "#"}], "type": "object"}
    yield "self-loop", self_loop, {"x": 1}
    draft4 = doubling(lambda i: f"d{i}.json", draft4_id, {"$schema": "http://json-schema.org/draft-04/schema#"})
    draft4["definitions"] = draft4.pop("$defs")
    yield "draft4-id", draft4, failing
    # References kept outside the keywords the cost model walks, reached through a pointer.
    outside = {f"d{i}": {"anyOf": [{"$ref": f"#/x-defs/d{i + 1}"}] * 2} for i in range(LEVELS)}
    outside[f"d{LEVELS}"] = {"type": "string"}
    yield "outside-keywords", {"x-defs": outside, "properties": {"x": {"$ref": "#/x-defs/d0"}}}, failing
    hidden = {f"d{i}": {"$anchor": f"a{i}", "$ref": f"#/x-defs/d{i}"} for i in range(LEVELS)}
    hidden[f"d{LEVELS}"] = {"$anchor": f"a{LEVELS}", "type": "string"}
    tucked = {f"d{i}": {"anyOf": [{"$ref": f"#a{i + 1}"}] * 2} for i in range(LEVELS)}
    yield "anchors-outside-keywords", {"$defs": hidden, "x-defs": tucked, "properties": {"x": {"$ref": "#/$defs/d0"}}}, failing
    for keyword in ("anyOf", "oneOf", "allOf"):
        yield f"nested-{keyword}", nested(keyword, 60), {"x": 1}
    yield "nested-deepest", nested("anyOf", 120), {"x": 1}
    wide = {"allOf": [{"type": ["integer", "array"], "not": {"const": i}} for i in range(400)], "items": {"$ref": "#"}}
    yield "items-recursion-wide", wide, [0] * 2000


def schema_body(schema, arguments):
    """A request declaring `schema` as tool `t`, with one completed call of it."""
    return {
        "model": "gpt-5",
        "tools": [{"type": "function", "name": "t", "parameters": schema}],
        "input": [
            {"type": "function_call", "call_id": "c1", "name": "t", "status": "completed", "arguments": json.dumps(arguments)},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ],
    }


def misspelled_bodies():
    """(name, raw body) whose member names read as gated names (the gate answers 400)."""
    call = '{"type":"function_call","call_id":"c1","name":"t","arguments":"{}","status":"completed"}'
    yield "top-INPUT", '{"model":"m","INPUT":[]}'
    yield "top-Model", '{"Model":"m","input":[]}'
    yield "item-Type", '{"input":[{"Type":"function_call","call_id":"c1"}]}'
    yield "item-type-nul", '{"input":[{"type\\u0000":"openai:web_search_call","id":"ws_1"}]}'
    yield "item-long-s-status", '{"input":[' + call.replace('"status"', '"\\u017ftatus"') + "]}"
    yield "item-zero-width", '{"input":[{"ty\\u200bpe":"message","role":"user","content":"hi"}]}'
    yield "tool-Parameters", '{"tools":[{"type":"function","name":"t","Parameters":{"type":"object"}}],"input":[' + call + "]}"
    # Names inside arguments and schemas are data, never misspellings.
    yield "names-as-data", '{"tools":[{"type":"function","name":"t","parameters":{"properties":{"Type":{}}}}],"input":[' + call.replace('"{}"', '"{\\"INPUT\\":1}"') + "]}"


def event_stream(answer):
    """`answer` as the event stream of a streamed response: created, each item done, completed."""
    head = dict(answer, status="in_progress", output=[])
    events = [("response.created", {"type": "response.created", "response": head})]
    for index, item in enumerate(answer["output"]):
        events.append(("response.output_item.done",
                       {"type": "response.output_item.done", "output_index": index, "item": item}))
    events.append(("response.completed", {"type": "response.completed", "response": answer}))
    return "".join(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
                   for name, data in events).encode()


def tap_seeds():
    """The ledger_tap seeds: (name, flags, chunk size, answer)."""
    answer = json.loads(ANSWER.read_text())
    raw = json.dumps(answer, separators=(",", ":")).encode()
    stream = event_stream(answer)
    return [
        ("json", 0, 0, raw),
        ("json-kept-chunks", 6, 7, raw),
        ("events", 1, 0, stream),
        ("events-kept-chunks", 7, 13, stream),
    ]


def client_frame(first, payload, mask=b"\0\0\0\0", length=None):
    """A client's frame: `first` (FIN, opcode), the length (declared as `length` if given), the
    mask, and the payload masked."""
    length = len(payload) if length is None else length
    if length < 126:
        head = bytes([first, 0x80 | length])
    elif length < 1 << 16:
        head = bytes([first, 0x80 | 126]) + length.to_bytes(2, "big")
    else:
        head = bytes([first, 0x80 | 127]) + length.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_seeds():
    """The ws_client_message seeds: (name, limits, wire)."""
    events = [
        {"type": "response.create", "model": "gpt-5", "store": False, "input": [{"role": "user", "content": "hi"}]},
        {"type": "response.create", "previous_response_id": "resp_1", "input": []},
        {"type": "response.cancel", "response_id": "resp_1"},
        {"type": "session.update", "session": {"type": "x"}},
        {"type": "response.cancel", "Type": "response.create"},
    ]
    texts = [json.dumps(event, separators=(",", ":")).encode() for event in events]
    # Members the relay reads, repeated, re-cased or escaped, and ids that are not strings.
    texts += [
        rb'{"type":"response.cancel","response_id":"resp_1","response_id":"resp_2"}',
        rb'{"type":"response.cancel","response_id":"resp_1","Response_Id":"resp_2","\u0072esponse_id":null}',
        rb'{"type":"conversation.item.delete","item_id":7,"previous_item_id":{"id":"x"},"conversation_id":"c"}',
        rb'{"type":"response.create","store":false,"STORE":true,"previous_response_id":"a","previous_response_id":"b"}',
    ]
    close = client_frame(0x88, (1000).to_bytes(2, "big") + b"bye")
    roomy = (1 << 16) - 1
    limits = lambda most, cap, others=0, chunk=0: most.to_bytes(2, "little") + cap.to_bytes(2, "little") + bytes([others, chunk])
    whole = b"".join(client_frame(0x81, text) for text in texts)
    masked = b"".join(client_frame(0x81, text, b"\x5a\xc3\x01\xff") for text in texts)
    first = texts[0]
    fragments = (client_frame(0x01, first[:10]) + client_frame(0x89, b"ping")
                 + client_frame(0x00, first[10:30]) + client_frame(0x8A, b"")
                 + client_frame(0x80, first[30:]))
    binary = client_frame(0x82, texts[2])
    return [
        ("events", limits(roomy, roomy), whole + close),
        ("events-masked-trickle", limits(roomy, roomy, 0, 3), masked + close),
        ("fragments-pings", limits(roomy, roomy, 0, 5), fragments + binary + close),
        ("over-limit", limits(64, roomy), whole + close),
        ("over-budget", limits(roomy, 200, 128), whole + close),
        ("huge-length", limits(roomy, roomy), client_frame(0x82, b"", length=(1 << 63) - 1) + close),
        ("huge-fragment", limits(roomy, roomy), client_frame(0x01, first[:10]) + client_frame(0x80, b"", length=1 << 40)),
        ("discard-to-close", limits(16, roomy), whole + client_frame(0x89, b"p") + close),
    ]


def main() -> None:
    gate = FUZZ / "seeds" / "gate_check"
    proxy = FUZZ / "seeds" / "proxy_handle"
    reader = FUZZ / "seeds" / "json_reader"
    for folder in (gate, proxy, reader):
        folder.mkdir(parents=True, exist_ok=True)
    seeds = []  # (name, gate selector, proxy path, body bytes)
    for name, provider, bits, body in fixture_cases():
        selector = PROVIDERS.get(provider, 2) + 4 * bits
        raw = json.dumps(body, separators=(",", ":")).encode()
        path = "/bedrock/v1/responses" if provider == "bedrock" else None
        seeds.append((name, selector, path, raw))
    for name, body in profiled_cases():
        seeds.append((name, PROFILED, None, json.dumps(body, separators=(",", ":")).encode()))
    for name, schema, arguments in schema_shapes():
        raw = json.dumps(schema_body(schema, arguments), separators=(",", ":")).encode()
        seeds.append((f"schema-{name}", 1, None, raw))
    for name, body in misspelled_bodies():
        seeds.append((f"name-{name}", 1, None, body.encode()))
    for number, (name, selector, path, body) in enumerate(seeds):
        (gate / f"{number:03}-{name}").write_bytes(bytes([selector]) + body)
        path = path or PATHS[number % len(PATHS)]
        head = f"{path}\ncontent-type: application/json\n\n".encode()
        (proxy / f"{number:03}-{name}").write_bytes(b"\x00" + head + body)
        (reader / f"{number:03}-{name}").write_bytes(body)
    tap = FUZZ / "seeds" / "ledger_tap"
    tap.mkdir(parents=True, exist_ok=True)
    for name, flags, chunk, answer in tap_seeds():
        (tap / name).write_bytes(bytes([flags, chunk]) + answer)
    judged = FUZZ / "seeds" / "judged_prefix"
    judged.mkdir(parents=True, exist_ok=True)
    for number, (name, _, _, body) in enumerate(seeds):
        try:
            items = json.loads(body).get("input")
        except (ValueError, AttributeError):
            continue
        if isinstance(items, list) and len(items) >= 2:
            selector = [1 | 2, 1 | 2 | 4, 1 | 8, 1 | 2 | 12, 0][number % 5]
            (judged / f"{number:03}-{name}").write_bytes(bytes([selector]) + body)
    ws = FUZZ / "seeds" / "ws_client_message"
    ws.mkdir(parents=True, exist_ok=True)
    for name, limits, wire in ws_seeds():
        (ws / name).write_bytes(limits + wire)
    print(f"{len(seeds)} seeds each in {gate.relative_to(FUZZ.parent)} and {proxy.relative_to(FUZZ.parent)}")


if __name__ == "__main__":
    main()
