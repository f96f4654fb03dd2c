//! The audit log (docs/teams.md#teams-and-policy): one JSON line per judged request, for the people
//! who answer for a team's traffic. It names who sent what where and what the gate decided, never a
//! prompt, an argument value or a key.
//!
//! Lines are written off the request path by the batched writer the process log uses, to a
//! file that is reopened on SIGHUP (so logrotate can move it away) and flushed when the
//! process stops.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::gate::{Action, Decision, Reason, Verdict};
use crate::telemetry::{batched, BatchedWriter, FlushGuard};

/// One line of the audit log.
#[derive(Debug, Serialize)]
pub(crate) struct AuditLine<'a> {
    /// When the request was judged (RFC 3339, UTC, milliseconds).
    pub(crate) ts: String,
    /// The request id (also in the access log and the answer's `x-replaygate-request-id`).
    pub(crate) request_id: &'a str,
    /// The key's team; `null` for anonymous clients.
    pub(crate) team: Option<&'a str>,
    /// The key's id, else the first 8 hex digits of its digest (never the key); `null` for
    /// anonymous clients and for a team named by its client certificate alone.
    pub(crate) key_id: Option<&'a str>,
    /// The name of the client certificate that named the team (`spiffe://...`, `dns:...`,
    /// `cn:...`; never the certificate); left out when no certificate did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) client_cert: Option<&'a str>,
    /// The provider the request was routed to.
    pub(crate) provider: &'a str,
    /// The request's model, when it names one.
    pub(crate) model: Option<&'a str>,
    /// What happened to it.
    pub(crate) decision: Decision,
    /// Every listed violation: where, why and what was done.
    pub(crate) violations: Vec<AuditViolation<'a>>,
    /// SHA-256 of the body bytes received, hex.
    pub(crate) body_sha256: String,
}

/// A violation as audited: no message (it may quote argument values).
#[derive(Debug, Serialize)]
pub(crate) struct AuditViolation<'a> {
    /// The item's position; `null` for a violation about `tools[i]`.
    pub(crate) index: Option<usize>,
    /// The reason code.
    pub(crate) reason: Reason,
    /// What was done.
    pub(crate) action: Action,
    /// The parameter at fault.
    pub(crate) param: &'a str,
}

/// The request an [`AuditLine`] is about: who sent it and where it went.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuditedRequest<'a> {
    /// The request id.
    pub(crate) request_id: &'a str,
    /// The key's team; `None` for anonymous clients.
    pub(crate) team: Option<&'a str>,
    /// The key's id or digest prefix (see [`AuditLine::key_id`]); `None` for anonymous
    /// clients.
    pub(crate) key_id: Option<&'a str>,
    /// The client certificate's matched name (see [`AuditLine::client_cert`]).
    pub(crate) client_cert: Option<&'a str>,
    /// The provider it was routed to.
    pub(crate) provider: &'a str,
    /// Its model, when it names one.
    pub(crate) model: Option<&'a str>,
}

impl<'a> AuditLine<'a> {
    /// The line for `request`, judged as `verdict`, whose body hashed to `body_sha256`
    /// ([`body_sha256`]).
    pub(crate) fn new(
        request: AuditedRequest<'a>,
        verdict: &'a Verdict,
        body_sha256: String,
    ) -> AuditLine<'a> {
        let AuditedRequest {
            request_id,
            team,
            key_id,
            client_cert,
            provider,
            model,
        } = request;
        AuditLine {
            ts: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            request_id,
            team,
            key_id,
            client_cert,
            provider,
            model,
            decision: verdict.decision(),
            violations: verdict
                .violations
                .iter()
                .map(|v| AuditViolation {
                    index: v.index,
                    reason: v.reason,
                    action: v.action,
                    param: &v.param,
                })
                .collect(),
            body_sha256,
        }
    }
}

/// A line about an answer (`"kind": "response"`): the function calls a provider produced
/// that do not fit the request's tools. The request's own line comes first, with the same
/// `request_id`.
#[derive(Debug, Serialize)]
pub(crate) struct ResponseAuditLine<'a> {
    /// When the answer was read (RFC 3339, UTC, milliseconds).
    pub(crate) ts: String,
    /// Always `response`: this line is about an answer, not a judged request.
    pub(crate) kind: &'static str,
    /// The request id.
    pub(crate) request_id: &'a str,
    /// The key's team; `null` for anonymous clients.
    pub(crate) team: Option<&'a str>,
    /// The provider that answered.
    pub(crate) provider: &'a str,
    /// The answer's response id.
    pub(crate) response_id: &'a str,
    /// Each flagged call: its position in `output`, the reason and the parameter.
    pub(crate) response_violations: Vec<ResponseAuditViolation<'a>>,
}

/// A flagged call as audited: no message (it may quote argument values).
#[derive(Debug, Serialize)]
pub(crate) struct ResponseAuditViolation<'a> {
    /// The call's position in the answer's `output`.
    pub(crate) index: usize,
    /// The reason code.
    pub(crate) reason: Reason,
    /// The parameter at fault, e.g. `output[1].arguments`.
    pub(crate) param: &'a str,
}

impl<'a> ResponseAuditLine<'a> {
    /// The line for `violations` of the answer `response_id` that `provider` gave request
    /// `request_id`.
    pub(crate) fn new(
        request_id: &'a str,
        team: Option<&'a str>,
        provider: &'a str,
        response_id: &'a str,
        violations: &'a [crate::gate::ResponseViolation],
    ) -> ResponseAuditLine<'a> {
        ResponseAuditLine {
            ts: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            kind: "response",
            request_id,
            team,
            provider,
            response_id,
            response_violations: violations
                .iter()
                .map(|v| ResponseAuditViolation {
                    index: v.index,
                    reason: v.reason,
                    param: &v.param,
                })
                .collect(),
        }
    }
}

/// A line about what an answer cost (`"kind": "usage"`, docs/usage.md#where-usage-shows),
/// written when the answer ends, after the request's own line (which is written before the
/// request is forwarded, so cannot know it), with the same `request_id`. The four counts are
/// `null` when the answer carried no usage that can be counted.
#[derive(Debug, Serialize)]
pub(crate) struct UsageAuditLine<'a> {
    /// When the answer ended (RFC 3339, UTC, milliseconds).
    pub(crate) ts: String,
    /// Always `usage`.
    pub(crate) kind: &'static str,
    /// The request id.
    pub(crate) request_id: &'a str,
    /// The key's team; `null` for anonymous clients.
    pub(crate) team: Option<&'a str>,
    /// The key's id; `null` for anonymous clients and a team known by its certificate alone.
    pub(crate) key_id: Option<&'a str>,
    /// The client certificate's matched name, as in [`AuditLine::client_cert`]; left out when
    /// no certificate named the team.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) client_cert: Option<&'a str>,
    /// The provider that answered.
    pub(crate) provider: &'a str,
    /// The answer's model, else the request's.
    pub(crate) model: Option<&'a str>,
    /// `reported` or `missing`.
    pub(crate) usage: &'static str,
    /// `input_tokens`.
    pub(crate) input_tokens: Option<u64>,
    /// `output_tokens`.
    pub(crate) output_tokens: Option<u64>,
    /// `input_tokens_details.cached_tokens`.
    pub(crate) cached_input_tokens: Option<u64>,
    /// `output_tokens_details.reasoning_tokens`.
    pub(crate) reasoning_output_tokens: Option<u64>,
}

impl<'a> UsageAuditLine<'a> {
    /// The line of an answer to request `request_id` whose usage was `usage`.
    pub(crate) fn new(
        request_id: &'a str,
        team: Option<&'a str>,
        key_id: Option<&'a str>,
        client_cert: Option<&'a str>,
        provider: &'a str,
        model: Option<&'a str>,
        usage: crate::usage::AnswerUsage,
    ) -> UsageAuditLine<'a> {
        let counts = usage.reported();
        UsageAuditLine {
            ts: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            kind: "usage",
            request_id,
            team,
            key_id,
            client_cert,
            provider,
            model,
            usage: if counts.is_some() { "reported" } else { "missing" },
            input_tokens: counts.map(|counts| counts.input),
            output_tokens: counts.map(|counts| counts.output),
            cached_input_tokens: counts.map(|counts| counts.cached_input),
            reasoning_output_tokens: counts.map(|counts| counts.reasoning_output),
        }
    }
}

/// SHA-256 of `body`, hex: what an audit line says of the bytes received. Computed where the
/// body is judged (on the blocking pool for large bodies), not on the worker.
pub(crate) fn body_sha256(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// The audit log of the process: a batched writer over a file that can be reopened.
pub(crate) struct AuditLog {
    writer: BatchedWriter,
    reopen: Arc<Mutex<Option<PathBuf>>>,
    /// Writes what is gathered when the last holder drops the log.
    _flush: FlushGuard,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditLog")
    }
}

impl AuditLog {
    /// Opens (creating, appending to) the file at `path` and starts its writer.
    pub(crate) fn open(path: &Path) -> io::Result<AuditLog> {
        let reopen = Arc::new(Mutex::new(None));
        let file = ReopenedFile {
            file: append(path)?,
            reopen: reopen.clone(),
        };
        let (writer, flush) = batched(file)?;
        Ok(AuditLog {
            writer,
            reopen,
            _flush: flush,
        })
    }

    /// Writes one line ([`AuditLine`] or [`ResponseAuditLine`]).
    pub(crate) fn write(&self, line: &impl Serialize) {
        let mut text = serde_json::to_vec(line).expect("an audit line serializes");
        text.push(b'\n');
        let mut writer = self.writer.clone();
        if let Err(error) = writer.write_all(&text) {
            tracing::error!(%error, "an audit line could not be written");
        }
    }

    /// Reopens the file at `path` (the same path after logrotate moved the file, or a new one
    /// after a reload) before the next batch is written.
    pub(crate) fn reopen(&self, path: &Path) {
        *self.reopen.lock().unwrap_or_else(PoisonError::into_inner) = Some(path.to_owned());
    }
}

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The audit file, reopened at the path asked for before the next write after a reopen.
struct ReopenedFile {
    file: File,
    reopen: Arc<Mutex<Option<PathBuf>>>,
}

impl Write for ReopenedFile {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let asked = self.reopen.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(path) = asked {
            match append(&path) {
                Ok(file) => self.file = file,
                // Keep writing where the lines went so far rather than losing them.
                Err(error) => {
                    tracing::error!(path = %path.display(), %error, "the audit log could not be reopened")
                }
            }
        }
        self.file.write(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Violation;

    fn verdict() -> Verdict {
        let mut verdict = Verdict::default();
        verdict.push_with(Reason::Status, Action::Strip, Some(2), 10, || Violation {
            index: Some(2),
            item_type: "function_call".into(),
            id: None,
            call_id: Some("c1".into()),
            reason: Reason::Status,
            action: Action::Strip,
            param: "input[2].status".into(),
            pointer: None,
            message: "the secret argument value".into(),
        });
        verdict
    }

    #[test]
    fn a_line_names_the_decision_and_violations_without_messages() {
        let verdict = verdict();
        let request = AuditedRequest {
            request_id: "req-1",
            team: Some("payments"),
            key_id: Some("ci-2026-12"),
            client_cert: None,
            provider: "openai",
            model: Some("gpt-5"),
        };
        let line = AuditLine::new(request, &verdict, body_sha256(b"{}"));
        let text = serde_json::to_string(&line).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["decision"], "stripped");
        assert_eq!(value["team"], "payments");
        assert_eq!(value["key_id"], "ci-2026-12");
        assert!(value.get("client_cert").is_none(), "{text}");
        assert_eq!(
            value["violations"][0],
            serde_json::json!({"index": 2, "reason": "status", "action": "strip", "param": "input[2].status"})
        );
        assert_eq!(
            value["body_sha256"],
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert!(!text.contains("secret"));
        assert!(value["ts"].as_str().unwrap().ends_with('Z'));
        // A team known by its certificate: the matched name, and no key.
        let request = AuditedRequest {
            key_id: None,
            client_cert: Some("spiffe://example.org/ns/payments/api"),
            ..request
        };
        let value = serde_json::to_value(AuditLine::new(request, &verdict, body_sha256(b"{}"))).unwrap();
        assert_eq!(value["client_cert"], "spiffe://example.org/ns/payments/api");
        assert_eq!(value["key_id"], serde_json::Value::Null);
    }

    /// Request `request_id` of an anonymous client, routed to `openai`.
    fn anonymous(request_id: &str) -> AuditedRequest<'_> {
        AuditedRequest {
            request_id,
            team: None,
            key_id: None,
            client_cert: None,
            provider: "openai",
            model: None,
        }
    }

    #[test]
    fn lines_reach_the_file_and_follow_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("audit.jsonl"), dir.path().join("rotated.jsonl"));
        let verdict = Verdict::default();
        let log = AuditLog::open(&first).unwrap();
        log.write(&AuditLine::new(anonymous("a"), &verdict, body_sha256(b"x")));
        // The writer thread writes within a few ticks; wait (boundedly) for the first line.
        for _ in 0..500 {
            if std::fs::metadata(&first).unwrap().len() > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::fs::rename(&first, &second).unwrap();
        log.reopen(&first);
        log.write(&AuditLine::new(anonymous("b"), &verdict, body_sha256(b"y")));
        drop(log);
        let read = |path: &Path| std::fs::read_to_string(path).unwrap();
        assert!(read(&second).contains("\"request_id\":\"a\""));
        let now = read(&first);
        assert!(
            now.contains("\"request_id\":\"b\"") && now.lines().count() == 1,
            "{now}"
        );
    }
}
