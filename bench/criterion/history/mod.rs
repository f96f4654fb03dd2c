//! Deterministic, realistic agent histories for the gate benchmark.
//!
//! A history is a coding-assistant session: user turns in prose, reasoning summaries, function
//! calls with arguments that fit their tool's JSON Schema, outputs carrying JSON text a few
//! hundred bytes long, and assistant replies with `output_text` parts. The same size always
//! gives the same bytes.

use replaygate::gate::{Gate, SchemaLimits};
use serde_json::{json, Value};

/// The gates both gate benchmarks measure: one long-lived gate, whose memory of passed calls
/// makes a replayed history cheap, and the same gate without that memory, where every call is
/// parsed and validated as on the first turn that sends it.
pub fn gates() -> (Gate, Gate) {
    let first_seen = Gate::new(SchemaLimits {
        passed_calls_bytes: 0,
        ..SchemaLimits::default()
    });
    (Gate::default(), first_seen)
}

/// The benchmarks' history of about `size` bytes (each size has its own fixed seed).
pub fn bench_body(size: usize) -> Vec<u8> {
    body(size, 0x5eed_0000 + size as u64)
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants): plenty for picking words.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options[self.below(options.len())]
    }
}

const WORDS: &[&str] = &[
    "the",
    "request",
    "handler",
    "returns",
    "a",
    "stale",
    "response",
    "when",
    "cache",
    "entry",
    "expires",
    "during",
    "retry",
    "loop",
    "we",
    "should",
    "check",
    "whether",
    "timeout",
    "is",
    "applied",
    "before",
    "or",
    "after",
    "connection",
    "pool",
    "hands",
    "out",
    "socket",
    "this",
    "test",
    "fails",
    "only",
    "on",
    "CI",
    "machines",
    "with",
    "two",
    "cores",
    "and",
    "slow",
    "disks",
    "can",
    "you",
    "look",
    "at",
    "config",
    "loader",
    "it",
    "reads",
    "environment",
    "variables",
    "first",
    "then",
    "falls",
    "back",
    "to",
    "file",
    "defaults",
    "error",
    "message",
    "says",
    "missing",
    "field",
    "but",
    "schema",
    "marks",
    "as",
    "optional",
    "migration",
    "script",
    "adds",
    "column",
    "without",
    "index",
    "which",
    "makes",
    "query",
    "planner",
    "pick",
    "sequential",
    "scan",
    "for",
    "large",
    "tables",
    "please",
    "keep",
    "public",
    "API",
    "stable",
    "rename",
    "internal",
    "helper",
    "instead",
    "benchmark",
    "shows",
    "regression",
    "of",
    "about",
    "twelve",
    "percent",
    "since",
    "last",
    "release",
    "flame",
    "graph",
    "points",
    "allocator",
    "in",
    "hot",
    "path",
    "serializer",
    "clones",
    "every",
    "string",
    "buffer",
    "could",
    "borrow",
    "from",
    "input",
    "slice",
    "deadline",
    "tomorrow",
    "morning",
    "so",
    "small",
    "safe",
    "change",
    "preferred",
    "over",
    "rewrite",
    "customer",
    "reported",
    "crash",
    "Safari",
    "upload",
    "dialog",
    "reproduces",
    "locally",
    "Firefox",
    "logs",
    "show",
    "null",
    "pointer",
    "worker",
    "thread",
    "shutdown",
];

/// Phrases with non-ASCII text or characters JSON escapes, mixed into some turns.
const SPICE: &[&str] = &[
    "the café in Zürich",
    "a naïve implementation",
    "“smart quotes” from the doc",
    "日本語のエラーメッセージ",
    "emoji in the commit title 🚀",
    "a path like C:\\Users\\dev\\repo\\src",
    "the line `let x = \"quoted\";`",
    "tab\tseparated\tcolumns",
    "Ελληνικά και русский текст",
    "an em dash — and an ellipsis …",
];

fn sentence(rng: &mut Lcg, out: &mut String) {
    let words = 6 + rng.below(14);
    for i in 0..words {
        let word = rng.pick(WORDS);
        if i == 0 {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                out.extend(first.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push(' ');
            out.push_str(word);
        }
        if i + 1 < words && rng.chance(4) {
            out.push_str(", ");
            out.push_str(rng.pick(SPICE));
        }
    }
    out.push_str(if rng.chance(15) { "?" } else { "." });
}

fn prose(rng: &mut Lcg, sentences: usize) -> String {
    let mut out = String::new();
    for i in 0..sentences {
        if i > 0 {
            out.push_str(if rng.chance(20) { "\n\n" } else { " " });
        }
        sentence(rng, &mut out);
    }
    out
}

const PATHS: &[&str] = &[
    "src/server/handler.rs",
    "src/server/retry.rs",
    "src/cache/mod.rs",
    "src/config/loader.rs",
    "migrations/0042_add_orders_index.sql",
    "web/src/components/UploadDialog.tsx",
    "tests/integration/pool.rs",
    "docs/architecture.md",
];

/// The request's function tools: objects, enums, required members, nested arrays, and
/// `additionalProperties: false`.
pub fn tools() -> Value {
    json!([
        {
            "type": "function",
            "name": "search_code",
            "description": "Search the repository for text, a regular expression or a symbol.",
            "strict": true,
            "parameters": {
                "type": "object",
                "additionalProperties": false,
                "required": ["query", "mode"],
                "properties": {
                    "query": {"type": "string", "minLength": 1, "description": "What to look for."},
                    "mode": {"type": "string", "enum": ["literal", "regex", "symbol"]},
                    "paths": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 200}
                }
            }
        },
        {
            "type": "function",
            "name": "read_file",
            "description": "Read parts of a file, by line ranges.",
            "parameters": {
                "type": "object",
                "additionalProperties": false,
                "required": ["path"],
                "properties": {
                    "path": {"type": "string", "pattern": "^[A-Za-z0-9_./-]+$"},
                    "ranges": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": false,
                            "required": ["start", "end"],
                            "properties": {
                                "start": {"type": "integer", "minimum": 1},
                                "end": {"type": "integer", "minimum": 1}
                            }
                        }
                    },
                    "encoding": {"type": "string", "enum": ["utf-8", "latin-1"]}
                }
            }
        },
        {
            "type": "function",
            "name": "run_command",
            "description": "Run a command in the sandbox and return its output.",
            "parameters": {
                "type": "object",
                "additionalProperties": false,
                "required": ["program", "args"],
                "properties": {
                    "program": {"type": "string", "enum": ["cargo", "git", "npm", "pytest", "rg"]},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "timeout_ms": {"type": "integer", "minimum": 100, "maximum": 600000}
                }
            }
        },
        {
            "type": "function",
            "name": "file_ticket",
            "description": "File an issue in the tracker.",
            "parameters": {
                "type": "object",
                "additionalProperties": false,
                "required": ["title", "priority", "labels"],
                "properties": {
                    "title": {"type": "string", "maxLength": 200},
                    "priority": {"type": "string", "enum": ["p0", "p1", "p2", "p3"]},
                    "labels": {
                        "type": "array",
                        "uniqueItems": true,
                        "items": {"type": "string", "enum": ["bug", "perf", "flaky", "docs", "security"]}
                    },
                    "assignee": {"type": ["string", "null"]},
                    "checklist": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": false,
                            "required": ["text", "done"],
                            "properties": {"text": {"type": "string"}, "done": {"type": "boolean"}}
                        }
                    }
                }
            }
        },
        {"type": "web_search"}
    ])
}

/// A call's tool name, its arguments, and the JSON text its output carries.
fn call(rng: &mut Lcg) -> (&'static str, Value, Value) {
    match rng.below(4) {
        0 => {
            let query = rng.pick(WORDS);
            let hits: Vec<Value> = (0..3 + rng.below(5))
                .map(|_| {
                    json!({
                        "path": rng.pick(PATHS),
                        "line": rng.range(1, 900),
                        "preview": prose(rng, 1),
                    })
                })
                .collect();
            let mut args = json!({"query": query, "mode": rng.pick(&["literal", "regex", "symbol"])});
            if rng.chance(50) {
                args["paths"] = json!(["src/**/*.rs", "tests/**"]);
            }
            if rng.chance(50) {
                args["max_results"] = json!(rng.range(1, 200));
            }
            (
                "search_code",
                args,
                json!({"query": query, "total": hits.len(), "hits": hits}),
            )
        }
        1 => {
            let start = rng.range(1, 400);
            let end = start + rng.range(5, 40);
            let path = rng.pick(PATHS);
            let shown = 4 + rng.range(0, 6);
            let lines: Vec<String> = (start..start + shown)
                .map(|n| format!("{n:>4}  {}", prose(rng, 1)))
                .collect();
            let args = json!({"path": path, "ranges": [{"start": start, "end": end}], "encoding": "utf-8"});
            (
                "read_file",
                args,
                json!({"path": path, "text": lines.join("\n"), "truncated": false}),
            )
        }
        2 => {
            let program = rng.pick(&["cargo", "git", "npm", "pytest", "rg"]);
            let args = json!({
                "program": program,
                "args": ["test", "--", rng.pick(WORDS)],
                "env": {"RUST_BACKTRACE": "1", "NO_COLOR": "1"},
                "timeout_ms": rng.range(1000, 120000),
            });
            let sentences = 3 + rng.below(5);
            let stdout = prose(rng, sentences);
            let output = json!({
                "exit_code": rng.range(0, 1),
                "stdout": stdout,
                "stderr": if rng.chance(30) { prose(rng, 2) } else { String::new() },
                "duration_ms": rng.range(20, 90000),
            });
            ("run_command", args, output)
        }
        _ => {
            let checklist: Vec<Value> = (0..rng.below(4))
                .map(|_| json!({"text": prose(rng, 1), "done": rng.chance(30)}))
                .collect();
            let args = json!({
                "title": prose(rng, 1).chars().take(120).collect::<String>(),
                "priority": rng.pick(&["p0", "p1", "p2", "p3"]),
                "labels": ["bug", rng.pick(&["perf", "flaky", "docs"])],
                "assignee": if rng.chance(50) { Value::Null } else { json!("dev-on-call") },
                "checklist": checklist,
            });
            let output = json!({
                "id": format!("TCK-{}", rng.range(1000, 9999)),
                "url": format!("https://tracker.invalid/t/{}", rng.range(1000, 9999)),
                "created": true,
                "note": prose(rng, 2),
            });
            ("file_ticket", args, output)
        }
    }
}

/// Builds items into `input` until the body would reach about `target` bytes.
struct Builder {
    rng: Lcg,
    items: Vec<Value>,
    bytes: usize,
    calls: usize,
}

impl Builder {
    fn push(&mut self, item: Value) {
        self.bytes += item.to_string().len() + 1;
        self.items.push(item);
    }

    fn user_turn(&mut self) {
        let sentences = 1 + self.rng.below(6);
        let text = prose(&mut self.rng, sentences);
        let item = if self.rng.chance(50) {
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        } else {
            json!({"role": "user", "content": text})
        };
        self.push(item);
    }

    fn reasoning(&mut self) {
        let id = format!("rs_{:016x}", self.rng.next());
        let summary = prose(&mut self.rng, 2);
        self.push(json!({
            "type": "reasoning",
            "id": id,
            "summary": [{"type": "summary_text", "text": summary}],
        }));
    }

    /// One or more calls (parallel calls sometimes), then their outputs.
    fn tool_round(&mut self) {
        let parallel = if self.rng.chance(25) { 2 } else { 1 };
        let mut outputs = Vec::with_capacity(parallel);
        for _ in 0..parallel {
            self.calls += 1;
            let (name, args, output) = call(&mut self.rng);
            let call_id = format!("call_{:06}_{:08x}", self.calls, self.rng.next());
            self.push(json!({
                "type": "function_call",
                "id": format!("fc_{:06}", self.calls),
                "call_id": call_id,
                "name": name,
                "arguments": args.to_string(),
                "status": "completed",
            }));
            outputs.push((call_id, output));
        }
        for (call_id, output) in outputs {
            self.push(json!({
                "type": "function_call_output",
                "call_id": call_id,
                "output": output.to_string(),
            }));
        }
    }

    fn assistant(&mut self) {
        let id = format!("msg_{:016x}", self.rng.next());
        let sentences = 2 + self.rng.below(6);
        let text = prose(&mut self.rng, sentences);
        self.push(json!({
            "type": "message",
            "id": id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }));
    }
}

/// A request body of about `target` bytes (a little over, never under).
pub fn body(target: usize, seed: u64) -> Vec<u8> {
    let tools = tools();
    let head = json!({"model": "gpt-5", "tools": tools, "input": []})
        .to_string()
        .len();
    let mut b = Builder {
        rng: Lcg(seed),
        items: Vec::new(),
        bytes: head,
        calls: 0,
    };
    b.push(json!({"type": "message", "role": "developer", "content": "You are a careful coding agent. Prefer small, safe changes."}));
    while b.bytes < target {
        b.user_turn();
        if b.rng.chance(40) {
            b.reasoning();
        }
        for _ in 0..b.rng.below(4) {
            b.tool_round();
        }
        b.assistant();
    }
    let body = json!({
        "model": "gpt-5",
        "tools": tools,
        "input": b.items,
        "store": false,
        "parallel_tool_calls": true,
    });
    serde_json::to_vec(&body).expect("a Value serializes")
}

/// The key kept inputs are hashed with: the proxy draws one per process, a benchmark takes a
/// fixed one (the hash costs the same under any key).
pub fn judge_key() -> replaygate::gate::JudgeKey {
    replaygate::gate::JudgeKey::from_bytes([0x5a; 32])
}

/// The kept input of a history's previous turn: the body cut at the last item boundary that
/// leaves at least one item new and whose earlier part judges clean and kept (as the proxy
/// keeps it). The next turn is then `body` itself.
pub fn kept_previous_turn(
    gate: &Gate,
    target: &replaygate::gate::Target<'_>,
    body: &[u8],
) -> replaygate::gate::KeptInput {
    use replaygate::gate::{parse_noting_spans, InputProbe, ItemsAt};
    let whole = parse_noting_spans(body, ItemsAt::Input).expect("the body reads");
    let spans = whole.item_spans().expect("spans noted").to_vec();
    let end = spans.last().expect("items").end;
    for count in (2..spans.len()).rev() {
        let mut earlier = body[..spans[count - 1].end].to_vec();
        earlier.extend_from_slice(&body[end..]);
        let request = parse_noting_spans(&earlier, ItemsAt::Input).expect("a prefix reads");
        if let Ok((_, Some(prefix))) = gate.judge_keeping(&request, target, None, &judge_key()) {
            let probe = InputProbe::of(&earlier, 0, &judge_key()).expect("the prefix is probed");
            return probe.keep(&earlier, None, &request, prefix).expect("kept");
        }
    }
    panic!("no prefix of the history judges clean");
}

/// Judges `body` as the proxy judges the next turn of a session whose previous turn was kept
/// (`previous`): probes the body, finds that it continues the kept input (its text hashed),
/// reads the body after it, judges the new items and keeps the whole input for the next turn.
pub fn judge_next_turn(
    gate: &Gate,
    target: &replaygate::gate::Target<'_>,
    body: &[u8],
    previous: &replaygate::gate::KeptInput,
) -> replaygate::gate::Verdict {
    use replaygate::gate::{parse_after_known, InputProbe, ItemsAt};
    let probe = InputProbe::of(body, 0, &judge_key()).expect("the body is probed");
    let mut continued = probe
        .continues(body, previous)
        .expect("the previous turn goes on");
    let request = parse_after_known(body, ItemsAt::Input, true, continued.known()).expect("the body reads");
    assert!(continued.decides_alike(&request));
    let (verdict, prefix) = gate
        .judge_after(&request, target, previous.prefix(), None)
        .expect("within the budget")
        .expect("judged after the previous turn");
    let kept = prefix.and_then(|prefix| probe.keep(body, Some(&continued), &request, prefix));
    std::hint::black_box(kept);
    verdict
}

/// What the ledger would know of a history's items (as `state_not_stored` reads it): every
/// output item with an id long enough to index, recorded for one OpenAI response, its provider
/// having stored it or not (`not_stored`).
#[allow(dead_code)] // counted by gate_icount alone
pub fn recorded(body: &[u8], not_stored: bool) -> replaygate::gate::Provenance {
    use replaygate::gate::provenance::{item_record_from_value, names_one_item, Owner, StoredItem};
    let body: Value = serde_json::from_slice(body).expect("a history is JSON");
    let mut provenance = replaygate::gate::Provenance::default();
    for item in body["input"].as_array().into_iter().flatten() {
        let Some(record) = item_record_from_value(item) else {
            continue;
        };
        let Some(id) = record.id.clone().filter(|id| names_one_item(id)) else {
            continue;
        };
        let stored = StoredItem {
            response_id: "resp_bench".to_owned(),
            owner: Owner {
                provider: "openai".to_owned(),
                model: Some("gpt-5".to_owned()),
            },
            record,
            expires_unix: u64::MAX,
            team: None,
            not_stored,
        };
        provenance.items.insert(id, stored);
    }
    provenance
}
