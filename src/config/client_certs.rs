//! A team's `client_certs` (docs/teams.md#a-team-known-by-its-client-certificate): globs over the
//! names of a verified client certificate, each for one kind of name, and the load-time check
//! that no name could belong to two teams.

use std::ops::Range;

use globset::{Glob, GlobBuilder};
use toml::Spanned;

use super::error::Invalid;

/// Which of a certificate's names a `client_certs` glob is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CertNameKind {
    /// A URI subject alternative name (`spiffe://...`): the entry is written `SCHEME://...`.
    Uri,
    /// A DNS subject alternative name: the entry is written `dns:NAME`; compared without case.
    Dns,
    /// The subject's common name: the entry is written `cn:NAME`.
    Cn,
}

impl CertNameKind {
    /// The prefix a certificate's name of this kind is written with in logs (as in
    /// `client_certs`): none for a URI, which carries its own scheme.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            CertNameKind::Uri => "",
            CertNameKind::Dns => "dns:",
            CertNameKind::Cn => "cn:",
        }
    }
}

/// One entry of a team's `client_certs`, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClientCertGlob {
    /// The kind of name it is matched against.
    pub(crate) kind: CertNameKind,
    /// The glob without its `dns:` or `cn:` prefix (a URI glob keeps its scheme); a `dns:` one
    /// in lower case.
    pub(crate) pattern: String,
    /// The compiled glob: `*` any run of characters, `?` one, `\` escapes; a `dns:` one without
    /// case.
    pub(crate) glob: Glob,
}

impl ClientCertGlob {
    /// The entry as written in `client_certs` (with its prefix), for messages.
    pub(crate) fn written(&self) -> String {
        format!("{}{}", self.kind.prefix(), self.pattern)
    }
}

/// Reads one `client_certs` entry: `SCHEME://GLOB` (URI names), `dns:GLOB` or `cn:GLOB`.
pub(crate) fn parse(entry: &str) -> Result<ClientCertGlob, String> {
    let (kind, pattern) = if let Some(rest) = entry.strip_prefix("dns:") {
        (CertNameKind::Dns, rest.to_ascii_lowercase())
    } else if let Some(rest) = entry.strip_prefix("cn:") {
        (CertNameKind::Cn, rest.to_owned())
    } else if entry
        .split_once("://")
        .is_some_and(|(scheme, _)| is_scheme(scheme))
    {
        (CertNameKind::Uri, entry.to_owned())
    } else {
        return Err(format!(
            "client_certs entry {entry:?} must be a URI glob (`spiffe://example.org/ns/payments/*`), \
             `dns:GLOB` or `cn:GLOB`"
        ));
    };
    if pattern.is_empty() {
        return Err(format!(
            "client_certs entry {entry:?} names nothing after its prefix"
        ));
    }
    if pattern.chars().any(char::is_control) {
        return Err(format!("client_certs entry {entry:?} holds a control character"));
    }
    if let Some(special) = unescaped(&pattern)
        .chars()
        .find(|c| matches!(c, '[' | ']' | '{' | '}'))
    {
        return Err(format!(
            "client_certs entry {entry:?}: `{special}` is not allowed (globs here have `*` and `?` \
             only); write `\\{special}` for the character itself"
        ));
    }
    let glob = GlobBuilder::new(&pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .case_insensitive(kind == CertNameKind::Dns)
        .build()
        .map_err(|e| format!("client_certs entry {entry:?} is not a valid glob: {e}"))?;
    Ok(ClientCertGlob { kind, pattern, glob })
}

/// Reads a team's `client_certs`, each entry with where it is written.
pub(super) fn parse_all(
    written: Vec<Spanned<String>>,
) -> Result<Vec<(ClientCertGlob, Range<usize>)>, Invalid> {
    written
        .into_iter()
        .map(|entry| {
            let span = entry.span();
            parse(entry.get_ref())
                .map(|glob| (glob, span.clone()))
                .map_err(|message| Invalid::new(span, message))
        })
        .collect()
}

/// The `client_certs` of the teams checked so far, to hold each new team's against.
#[derive(Default)]
pub(super) struct Claimed {
    globs: Vec<(String, ClientCertGlob)>,
}

impl Claimed {
    /// Refuses `team`'s globs when one could match a name another team's glob of the same
    /// kind matches (docs/teams.md#a-team-known-by-its-client-certificate); else claims them for `team`.
    pub(super) fn claim(
        &mut self,
        team: &str,
        globs: &[(ClientCertGlob, Range<usize>)],
    ) -> Result<(), Invalid> {
        for (glob, span) in globs {
            let taken = self.globs.iter().find(|(owner, other)| {
                owner != team && other.kind == glob.kind && overlap(&other.pattern, &glob.pattern)
            });
            if let Some((owner, other)) = taken {
                return Err(Invalid::new(
                    span.clone(),
                    format!(
                        "client_certs entry {:?} of team {team:?} and {:?} of team {owner:?} can both \
                         match one certificate name, so it would identify two teams; make them disjoint",
                        glob.written(),
                        other.written()
                    ),
                ));
            }
        }
        self.globs
            .extend(globs.iter().map(|(glob, _)| (team.to_owned(), glob.clone())));
        Ok(())
    }
}

/// One position of a glob: a character, `?` (any one) or `*` (any run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Char(char),
    One,
    Any,
}

/// The tokens of `pattern` (`\` escapes the character after it).
fn tokens(pattern: &str) -> Vec<Token> {
    let mut tokens = Vec::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        tokens.push(match c {
            '\\' => Token::Char(chars.next().unwrap_or('\\')),
            '?' => Token::One,
            '*' => Token::Any,
            c => Token::Char(c),
        });
    }
    tokens
}

/// `pattern` with every escaped character left out: where an unescaped special character
/// would be found.
fn unescaped(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            chars.next();
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether some name matches both globs (`*`, `?` and escaped characters only; the two of the
/// same kind, so a `dns:` pair is already in lower case). Exact: it walks both globs at once,
/// each step either letting a `*` stop, or spelling one character of a name both accept.
fn overlap(a: &str, b: &str) -> bool {
    let (a, b) = (tokens(a), tokens(b));
    // reached[i][j]: a name's prefix that `a[..i]` and `b[..j]` both match exists.
    let mut reached = vec![vec![false; b.len() + 1]; a.len() + 1];
    reached[0][0] = true;
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            if !reached[i][j] {
                continue;
            }
            let (x, y) = (a.get(i).copied(), b.get(j).copied());
            // A `*` that matches nothing more.
            if x == Some(Token::Any) {
                reached[i + 1][j] = true;
            }
            if y == Some(Token::Any) {
                reached[i][j + 1] = true;
            }
            // One more character of the name.
            match (x, y) {
                (Some(Token::Any), Some(Token::Any)) | (None, _) | (_, None) => {}
                (Some(Token::Any), Some(_)) => reached[i][j + 1] = true,
                (Some(_), Some(Token::Any)) => reached[i + 1][j] = true,
                (Some(Token::Char(p)), Some(Token::Char(q))) if p != q => {}
                (Some(_), Some(_)) => reached[i + 1][j + 1] = true,
            }
        }
    }
    reached[a.len()][b.len()]
}

/// Whether `text` is a URI scheme: a letter, then letters, digits, `+`, `-` or `.`.
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_their_kind_by_prefix() {
        let uri = parse("spiffe://example.org/ns/payments/*").unwrap();
        assert_eq!(
            (uri.kind, uri.pattern.as_str()),
            (CertNameKind::Uri, "spiffe://example.org/ns/payments/*")
        );
        assert!(uri
            .glob
            .compile_matcher()
            .is_match("spiffe://example.org/ns/payments/sa/api"));
        let dns = parse("dns:Payments-Bot.internal").unwrap();
        assert_eq!(
            (dns.kind, dns.pattern.as_str()),
            (CertNameKind::Dns, "payments-bot.internal")
        );
        assert!(dns.glob.compile_matcher().is_match("PAYMENTS-bot.internal"));
        let cn = parse("cn:payments-ci").unwrap();
        assert_eq!(
            (cn.kind, cn.written()),
            (CertNameKind::Cn, "cn:payments-ci".to_owned())
        );
        assert!(!cn.glob.compile_matcher().is_match("Payments-CI"));
        for bad in [
            "payments-ci",
            "uri:spiffe://x",
            "*://x",
            "dns:",
            "cn:",
            "dns:[ab].internal",
            "cn:{a,b}",
            "cn:a\u{7}",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(r"cn:team \[blue\]")
            .unwrap()
            .glob
            .compile_matcher()
            .is_match("team [blue]"));
    }

    #[test]
    fn globs_overlap_exactly_when_a_name_matches_both() {
        for (a, b) in [
            ("spiffe://example.org/ns/payments/*", "spiffe://example.org/ns/*"),
            (
                "spiffe://example.org/ns/payments/*",
                "spiffe://example.org/*/payments/api",
            ),
            ("ci-*", "*-bot"),
            ("a?c", "*b*"),
            ("payments", "payments"),
            ("*", "anything"),
            ("x*", "*"),
            ("a**b", "ab"),
        ] {
            assert!(overlap(a, b) && overlap(b, a), "{a} and {b} share a name");
        }
        for (a, b) in [
            (
                "spiffe://example.org/ns/payments/*",
                "spiffe://example.org/ns/search/*",
            ),
            ("ci-*", "bot-*"),
            ("a?c", "abbc"),
            ("payments", "payment"),
            (r"a\*", "ab"),
            ("*.internal", "*.example"),
        ] {
            assert!(!overlap(a, b) && !overlap(b, a), "{a} and {b} share no name");
        }
    }
}
