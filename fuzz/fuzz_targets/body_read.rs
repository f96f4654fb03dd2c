//! The request body reader under arbitrary chunking, declared lengths, limits and read errors:
//! it returns exactly the bytes sent, or refuses a body over the cap, or reports the error,
//! whichever comes first, and never reads on past the cap; once the body is dropped, its share of
//! the shared buffer budget is given back.

#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue};
use http_body_util::StreamBody;
use libfuzzer_sys::fuzz_target;
use replaygate::proxy::body::{read_body, BodyLimits};
use replaygate::proxy::buffer_budget::BufferBudget;

#[derive(Arbitrary, Debug)]
struct Input {
    /// The body's frames: data, or an error from the client's connection.
    frames: Vec<Option<Vec<u8>>>,
    /// A `Content-Length` header, as text (it may be anything).
    content_length: Option<String>,
    /// The cap, small so both sides of it are reached.
    max_bytes: u16,
}

/// What `read_body` must do with `input`.
#[derive(Debug, PartialEq)]
enum Outcome {
    Read(Vec<u8>),
    TooLarge,
    Unreadable,
}

fn expected(input: &Input, declared: Option<u64>) -> Outcome {
    let max = usize::from(input.max_bytes);
    if declared.is_some_and(|length| length > max as u64) {
        return Outcome::TooLarge;
    }
    let mut read = Vec::new();
    for frame in &input.frames {
        match frame {
            None => return Outcome::Unreadable,
            Some(data) => {
                read.extend_from_slice(data);
                if read.len() > max {
                    return Outcome::TooLarge;
                }
            }
        }
    }
    Outcome::Read(read)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    })
}

fuzz_target!(|input: Input| {
    let mut headers = HeaderMap::new();
    let mut declared = None;
    if let Some(text) = &input.content_length {
        if let Ok(value) = HeaderValue::from_str(text) {
            declared = text.parse::<u64>().ok();
            headers.insert(header::CONTENT_LENGTH, value);
        }
    }
    let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = input
        .frames
        .iter()
        .map(|frame| match frame {
            Some(data) => Ok(http_body::Frame::data(Bytes::copy_from_slice(data))),
            None => Err(std::io::Error::other("connection reset")),
        })
        .collect();
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let limits = BodyLimits {
        max_bytes: usize::from(input.max_bytes),
        read_timeout: Duration::from_secs(3600),
    };
    // A shared budget with room for any body under the cap: only the cap refuses here.
    let budget = BufferBudget::new(2 * usize::from(u16::MAX));
    let got = match runtime().block_on(read_body(body, &headers, limits, &budget)) {
        Ok(held) => Outcome::Read(held.bytes.to_vec()),
        Err(error) => match error.code() {
            "body_too_large" => Outcome::TooLarge,
            "body_unreadable" => Outcome::Unreadable,
            other => panic!("unexpected error code {other}"),
        },
    };
    assert_eq!(got, expected(&input, declared), "{input:?}");
    assert_eq!(
        budget.reserved(),
        0,
        "the body's share of the budget was not given back"
    );
});
