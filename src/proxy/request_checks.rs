//! Checks on the head of a gated request that keep the bytes the gate judges the bytes the
//! provider reads: only `POST` carries a body onward, and the body is declared UTF-8 or not at
//! all.
//!
//! An upstream may read what the gate passed differently: a Python server treats `post` as
//! `POST` and a `PUT` body like a `POST` one, and an `application/json; charset=utf-7` body
//! decodes to other text than the UTF-8 the gate read. Such requests are refused, not forwarded.

use http::{header, HeaderMap, Method};

use crate::error::ApiError;

/// Refuses a method other than `POST` that carries a body (405): a declared non-zero
/// `Content-Length`, any `Transfer-Encoding`, or body bytes that arrived (`body_len`).
pub(crate) fn check_method(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body_len: usize,
) -> Result<(), ApiError> {
    if method == Method::POST || !has_body(headers, body_len) {
        return Ok(());
    }
    Err(ApiError::MethodNotAllowed {
        method: method.as_str().to_owned(),
        path: path.to_owned(),
    })
}

fn has_body(headers: &HeaderMap, body_len: usize) -> bool {
    let declared = headers
        .get_all(header::CONTENT_LENGTH)
        .iter()
        .any(|value| value.as_bytes().iter().any(|&b| b != b'0'));
    body_len > 0 || declared || headers.contains_key(header::TRANSFER_ENCODING)
}

/// Refuses (415) more than one `Content-Type`, or one whose parameters cannot be read or name
/// a `charset` other than UTF-8 (`utf-8` or `utf8`, in any case, quoted or not). No
/// `Content-Type`, or one without a charset, passes: the body is judged whatever its label.
pub(crate) fn check_charset(headers: &HeaderMap) -> Result<(), ApiError> {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let Some(value) = values.next() else {
        return Ok(());
    };
    if values.next().is_some() {
        return Err(ApiError::UnsupportedCharset(
            "the request has more than one Content-Type; send one".into(),
        ));
    }
    let params = parameters(value.as_bytes()).ok_or_else(|| {
        ApiError::UnsupportedCharset(
            "the Content-Type cannot be read as one media type with parameters; \
             send application/json"
                .into(),
        )
    })?;
    for (name, charset) in params {
        if name.eq_ignore_ascii_case("charset") && !is_utf8(&charset) {
            let shown: String = charset.chars().take(40).collect();
            return Err(ApiError::UnsupportedCharset(format!(
                "the body must be UTF-8, but the Content-Type declares charset `{shown}`"
            )));
        }
    }
    Ok(())
}

fn is_utf8(charset: &str) -> bool {
    charset.eq_ignore_ascii_case("utf-8") || charset.eq_ignore_ascii_case("utf8")
}

/// The parameters of a `Content-Type` value (RFC 9110 §8.3.1: `type/subtype *(OWS ";" OWS
/// parameter)`), names as written and values unquoted. `None` when the value does not follow
/// that grammar (a comma-separated list, text in the media type that is not a token, a
/// parameter without `=`, an unterminated quoted string, bytes outside visible ASCII), since
/// another reader could then find a different charset in it.
fn parameters(value: &[u8]) -> Option<Vec<(String, String)>> {
    let mut rest = value;
    let media_type = trim(take_while(&mut rest, |b| b != b';'));
    let slash = media_type.iter().position(|&b| b == b'/')?;
    if !is_token(&media_type[..slash]) || !is_token(&media_type[slash + 1..]) {
        return None;
    }
    let mut params = Vec::new();
    loop {
        skip(&mut rest, |b| b == b';' || is_whitespace(b));
        if rest.is_empty() {
            return Some(params);
        }
        let name = take_while(&mut rest, is_token_byte);
        if name.is_empty() || rest.first() != Some(&b'=') {
            return None;
        }
        rest = &rest[1..];
        let value = if rest.first() == Some(&b'"') {
            quoted(&mut rest)?
        } else {
            let token = take_while(&mut rest, is_token_byte);
            if token.is_empty() {
                return None;
            }
            token.to_vec()
        };
        skip(&mut rest, is_whitespace);
        if !rest.is_empty() && rest[0] != b';' {
            return None;
        }
        params.push((ascii(name)?, ascii(&value)?));
    }
}

/// Reads a quoted string at the start of `rest` (which starts with `"`), undoing `\` escapes.
fn quoted(rest: &mut &[u8]) -> Option<Vec<u8>> {
    let mut value = Vec::new();
    let mut bytes = rest[1..].iter().enumerate();
    while let Some((at, &b)) = bytes.next() {
        match b {
            b'"' => {
                *rest = &rest[at + 2..];
                return Some(value);
            }
            b'\\' => value.push(*bytes.next()?.1),
            _ => value.push(b),
        }
    }
    None
}

fn take_while<'a>(rest: &mut &'a [u8], keep: impl Fn(u8) -> bool) -> &'a [u8] {
    let end = rest.iter().position(|&b| !keep(b)).unwrap_or(rest.len());
    let (taken, left) = rest.split_at(end);
    *rest = left;
    taken
}

fn skip(rest: &mut &[u8], drop: impl Fn(u8) -> bool) {
    take_while(rest, drop);
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|&b| !is_whitespace(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| !is_whitespace(b))
        .map_or(start, |end| end + 1);
    &bytes[start..end]
}

fn is_whitespace(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// A `tchar` of RFC 9110 §5.6.2.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(|&b| is_token_byte(b))
}

/// Visible ASCII and spaces only: anything else is not a charset name anyone agrees on.
fn ascii(bytes: &[u8]) -> Option<String> {
    bytes
        .iter()
        .all(|&b| b == b' ' || b.is_ascii_graphic())
        .then(|| String::from_utf8_lossy(bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    fn charset_of(content_type: &'static str) -> Result<(), ApiError> {
        check_charset(&headers(&[("content-type", content_type)]))
    }

    #[test]
    fn post_is_always_accepted() {
        let body = headers(&[("content-length", "12")]);
        assert!(check_method(&Method::POST, "/v1/responses", &body, 12).is_ok());
    }

    #[test]
    fn other_methods_without_a_body_are_accepted() {
        for (head, arrived) in [
            (headers(&[]), 0),
            (headers(&[("content-length", "0")]), 0),
            (headers(&[("content-length", "00")]), 0),
        ] {
            for method in [Method::GET, Method::DELETE, Method::HEAD] {
                assert!(check_method(&method, "/v1/responses", &head, arrived).is_ok());
            }
        }
    }

    #[test]
    fn other_methods_with_a_body_are_refused() {
        let lowercase_post = Method::from_bytes(b"post").unwrap();
        for method in [Method::PUT, Method::PATCH, Method::GET, lowercase_post] {
            for (head, arrived) in [
                (headers(&[("content-length", "2")]), 2),
                (headers(&[("transfer-encoding", "chunked")]), 0),
                (headers(&[]), 2),
                (headers(&[("content-length", "10")]), 0),
            ] {
                let error = check_method(&method, "/v1/responses", &head, arrived).unwrap_err();
                assert_eq!(error.code(), "method_not_allowed", "{method} {head:?}");
            }
        }
    }

    #[test]
    fn utf8_or_no_charset_is_accepted() {
        assert!(check_charset(&headers(&[])).is_ok());
        for value in [
            "application/json",
            "application/json; charset=utf-8",
            "application/json;charset=UTF-8",
            "application/json; charset=\"UTF8\"",
            "application/json; charset=\"utf\\-8\"",
            "application/json ; CharSet=Utf8 ; x=y",
            "application/json;",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=\"a;b\"",
        ] {
            assert!(charset_of(value).is_ok(), "{value}");
        }
    }

    #[test]
    fn another_charset_is_refused() {
        for value in [
            "application/json; charset=utf-7",
            "application/json; charset=\"utf-16\"",
            "application/json; charset=latin1",
            "application/json; charset=\"\"",
            "application/json; charset=utf-8; charset=utf-7",
            "application/json; charset=\"utf-8 \"",
        ] {
            let error = charset_of(value).unwrap_err();
            assert_eq!(error.code(), "unsupported_charset", "{value}");
        }
        assert!(charset_of("application/json; charset=utf-7")
            .unwrap_err()
            .message()
            .contains("`utf-7`"));
    }

    #[test]
    fn a_content_type_that_reads_two_ways_is_refused() {
        for value in [
            "application/json, text/plain; charset=utf-7",
            "application/json; charset=utf-8, text/plain; charset=utf-7",
            "application/json; charset",
            "application/json; charset=",
            "application/json; charset=\"utf-8",
            "application/json; charset=utf 8",
            "application/json; =utf-8",
            "application json",
            "application/",
            "",
        ] {
            let error = charset_of(value).unwrap_err();
            assert_eq!(error.code(), "unsupported_charset", "{value:?}");
        }
        let mut head = HeaderMap::new();
        head.insert(
            "content-type",
            HeaderValue::from_bytes(b"application/json; charset=\"utf-8\xff\"").unwrap(),
        );
        assert!(check_charset(&head).is_err());
    }

    #[test]
    fn two_content_types_are_refused_even_when_both_are_utf8() {
        let head = headers(&[
            ("content-type", "application/json"),
            ("content-type", "application/json; charset=utf-8"),
        ]);
        assert_eq!(check_charset(&head).unwrap_err().code(), "unsupported_charset");
    }
}
