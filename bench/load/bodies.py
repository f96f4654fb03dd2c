#!/usr/bin/env python3
"""Writes deterministic agent-history request bodies of exact sizes for the load harness.

    bench/load/bodies.py [--full] [--continue RESPONSE] OUT_DIR [SIZE ...]
                                  # sizes in bytes; default 1024 16384 262144 1048576

Each body is a coding agent's session as a Responses request: function tools with JSON Schemas
(enums, nested objects, arrays, additionalProperties false), user and assistant messages,
reasoning summaries, and completed function_call / function_call_output pairs whose arguments
fit their tool. Every item is one the gate fully checks, and every body is allowed for provider
`openai`. The same size always gives the same bytes (a fixed linear congruential generator), and
the last user message is sized so the body is exactly SIZE bytes. Writes OUT_DIR/SIZE.json.

A body under 8 KiB is the start of a narrow agent's session (one tool, no developer message);
`--full` makes every body a full agent's, all four tools declared, whatever its size: the
growing session's first turn (`examples/session_load.rs`), whose answers call any of them.

With `--continue RESPONSE` (a Responses JSON answer, e.g. bench/load/response.json), each body
is the next turn after that answer: `previous_response_id` names the answer's `id`, and a
`function_call_output` answers each of its function calls, after the history and before the
closing user message. From 8 KiB up, the answer's output items themselves (with the ids it gave
them, the tools they call declared) come first, as a client replaying its whole history sends
them; a smaller body has no room for them and leaves them to `previous_response_id`. Once the
proxy's ledger has recorded the answer, such a request makes it find the response (and, from
8 KiB, those items by id): the lookup path, with hits.
"""

import json
import sys
from pathlib import Path

WORDS = (
    "the request handler returns a stale response when cache entry expires during retry loop we "
    "should check whether timeout is applied before or after connection pool hands out socket "
    "this test fails only on CI machines with two cores so probably race between shutdown and "
    "accept path config parser rejects trailing commas but error message points at wrong line "
    "let me look at module first then write failing test fix it and run full suite again"
).split()
PATHS = ["src/server.rs", "src/pool.rs", "src/config/parse.rs", "tests/retry.rs", "README.md",
         "src/cache/entry.rs", "Cargo.toml", "src/shutdown.rs"]
COMMANDS = ["cargo test --locked", "cargo clippy -- -D warnings", "git diff --stat",
            "rg -n 'timeout' src", "cargo build --release"]
SCOPES = ["repo", "dir", "file"]


class Lcg:
    """A 64-bit linear congruential generator (Knuth's MMIX constants)."""

    def __init__(self, seed):
        self.state = seed

    def next(self):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return self.state >> 33

    def below(self, n):
        return self.next() % n

    def pick(self, options):
        return options[self.below(len(options))]


def prose(rng, words):
    text = " ".join(rng.pick(WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def tools():
    """Four function tools with schemas of the kinds agents send."""
    path = {"type": "string", "minLength": 1, "description": "Path relative to the repository root."}
    return [
        {"type": "function", "name": "read_file", "description": "Read part of a file.",
         "parameters": {"type": "object", "additionalProperties": False, "required": ["path"],
                        "properties": {"path": path,
                                       "start_line": {"type": "integer", "minimum": 1},
                                       "end_line": {"type": "integer", "minimum": 1}}}},
        {"type": "function", "name": "run_shell", "description": "Run a shell command.",
         "parameters": {"type": "object", "additionalProperties": False,
                        "required": ["command", "timeout_s"],
                        "properties": {"command": {"type": "string", "maxLength": 4000},
                                       "timeout_s": {"type": "integer", "minimum": 1, "maximum": 600},
                                       "env": {"type": "object",
                                               "additionalProperties": {"type": "string"}}}}},
        {"type": "function", "name": "edit_file", "description": "Replace text in a file.",
         "parameters": {"type": "object", "additionalProperties": False, "required": ["path", "edits"],
                        "properties": {"path": path,
                                       "edits": {"type": "array", "minItems": 1, "items": {
                                           "type": "object", "additionalProperties": False,
                                           "required": ["old", "new"],
                                           "properties": {"old": {"type": "string"},
                                                          "new": {"type": "string"}}}}}}},
        {"type": "function", "name": "search_code", "description": "Search the repository.",
         "parameters": {"type": "object", "additionalProperties": False, "required": ["query", "scope"],
                        "properties": {"query": {"type": "string", "minLength": 1},
                                       "scope": {"enum": SCOPES},
                                       "max_results": {"type": "integer", "minimum": 1,
                                                       "maximum": 100}}}},
    ]


def call(rng, name, small=False):
    """Arguments that fit `name`'s schema, and an output for them."""
    if name == "read_file":
        start = 1 + rng.below(400)
        args = {"path": rng.pick(PATHS), "start_line": start, "end_line": start + 40}
        lines = [f"{start + i}: {prose(rng, 6 + rng.below(8))}" for i in range(4 + rng.below(12))]
        return args, "\n".join(lines)
    if name == "run_shell":
        args = {"command": rng.pick(COMMANDS), "timeout_s": 30 + rng.below(300)}
        out = {"exit_code": rng.below(2), "stdout": prose(rng, 20 + rng.below(60)),
               "stderr": prose(rng, 1 + rng.below(20))}
        return args, json.dumps(out)
    if name == "edit_file":
        edits = [{"old": prose(rng, 3 + rng.below(6)), "new": prose(rng, 3 + rng.below(8))}
                 for _ in range(1 + rng.below(3))]
        return {"path": rng.pick(PATHS), "edits": edits}, json.dumps({"applied": len(edits)})
    args = {"query": rng.pick(WORDS), "scope": rng.pick(SCOPES), "max_results": 1 + rng.below(20)}
    hits = [{"path": rng.pick(PATHS), "line": 1 + rng.below(900), "text": prose(rng, 8)}
            for _ in range(1 if small else 1 + rng.below(6))]
    return args, json.dumps(hits)


def units(rng, names, small, paired):
    """Endless turns of a session, each a list of items that belong together; with `paired`, a
    reasoning item in one with the call it led to, so a body never ends up with one left
    without it (a repair; OpenAI refuses it). Without it, the bodies stay as they were measured
    before `--full`."""
    if not small:
        yield [{"type": "message", "role": "developer",
                "content": "You are a careful coding agent. Prefer small, safe changes."}]
    calls = 0
    while True:
        words = 6 + rng.below(6) if small else 10 + rng.below(40)
        yield [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": prose(rng, words)}]}]
        reasoning = []
        if rng.below(100) < 40:
            reasoning = [{"type": "reasoning", "id": f"rs_{rng.next():016x}",
                          "summary": [{"type": "summary_text",
                                       "text": prose(rng, 15 + rng.below(30))}]}]
        if reasoning and not paired:
            yield reasoning
            reasoning = []
        for _ in range(1 + rng.below(3)):
            calls += 1
            name = rng.pick(names)
            args, output = call(rng, name, small)
            call_id = f"call_{calls:06d}_{rng.next():08x}"
            yield reasoning + [
                {"type": "function_call", "id": f"fc_{calls:06d}", "call_id": call_id,
                 "name": name, "arguments": json.dumps(args, separators=(",", ":")),
                 "status": "completed"},
                {"type": "function_call_output", "call_id": call_id, "output": output}]
            reasoning = []
        yield [{"type": "message", "id": f"msg_{rng.next():016x}", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": prose(rng, 20 + rng.below(60)),
                             "annotations": []}]}]


def history(rng, budget, names, small, paired=False):
    """Whole turns while they fit in `budget` bytes (a turn that does not fit is skipped, up to
    a few times in a row, so small bodies still fill up)."""
    items, size, misses = [], 0, 0
    for unit in units(rng, names, small, paired):
        cost = sum(len(json.dumps(i, separators=(",", ":"))) + 1 for i in unit)
        if size + cost > budget:
            misses += 1
            if misses == 8:
                return items
            continue
        items += unit
        size += cost
        misses = 0
    return items


def continuation(answer, replay):
    """The items a client sends after `answer`: an output for each of its function calls,
    after the answer's own output items when it replays them (`replay`)."""
    items = []
    for item in answer["output"]:
        if replay:
            items.append(item)
        if item.get("type") == "function_call":
            items.append({"type": "function_call_output", "call_id": item["call_id"],
                          "output": "120: fn checkout(&self) -> Result<Conn, PoolError> {"})
    return items


def body(size, answer=None, full=False):
    """A request body of exactly `size` bytes; with `answer`, the turn after it; with `full`, a
    full agent's even when small."""
    rng = Lcg(0x5EED_0000 + size)
    # A small body is the start of a narrow agent's session: one tool, no developer message.
    small = size < 8192 and not full
    declared = tools()[3:] if small else tools()
    tail = []
    if answer is not None:
        if not small:
            called = {i["name"] for i in answer["output"] if i.get("type") == "function_call"}
            declared = [t for t in tools() if t in declared or t["name"] in called]
        tail = continuation(answer, replay=not small)
    names = [t["name"] for t in declared]
    request = {"model": "gpt-5", "tools": declared, "input": tail, "store": False}
    if answer is not None:
        request["previous_response_id"] = answer["id"]
    fixed = len(json.dumps(request, separators=(",", ":")))
    request["input"] = history(rng, size - fixed - 80, names, small, full) + tail
    # The closing user turn takes up the slack, one ASCII character per byte.
    closing = {"type": "message", "role": "user", "content": ""}
    request["input"].append(closing)
    slack = size - len(json.dumps(request, separators=(",", ":")))
    if slack < 0:
        raise SystemExit(f"a body of {size} bytes overshot by {-slack}")
    filler = prose(rng, slack // 4 + 2)[:slack]
    closing["content"] = filler[:-1] + "." if slack > 1 else filler
    data = json.dumps(request, separators=(",", ":")).encode()
    assert len(data) == size, (len(data), size)
    return data


def main():
    args = sys.argv[1:]
    answer = None
    full = args[:1] == ["--full"]
    if full:
        args = args[1:]
    if args[:1] == ["--continue"] and len(args) >= 2:
        answer = json.loads(Path(args[1]).read_text())
        args = args[2:]
    if not args:
        raise SystemExit(__doc__)
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args[1:]] or [1024, 16384, 262144, 1048576]
    for size in sizes:
        (out / f"{size}.json").write_bytes(body(size, answer, full))


if __name__ == "__main__":
    main()
