//! What `replaygate config check` says of the listener's TLS files: each is read and checked as
//! the listener would (the key matches the certificate), and the certificate must be valid now;
//! its expiry date is printed.

use std::time::{Duration, SystemTime};

use super::files::{self, TlsFileError, Why};
use super::server_config;
use crate::config::{ClientAuth, ListenerTls};

/// The lines `config check` prints of `tls` at `now`, or why its files cannot serve.
pub(crate) fn check(tls: &ListenerTls, now: SystemTime) -> Result<Vec<String>, TlsFileError> {
    let config = server_config::build(tls, server_config::ALPN)?;
    drop(config);
    let chain = files::certificates(tls.table, "tls_cert_file", &tls.cert_file)?;
    let bad = |why: String| {
        TlsFileError::new(
            tls.table,
            "tls_cert_file",
            &tls.cert_file,
            Why::BadCertificate(why),
        )
    };
    let (_, leaf) = x509_parser::parse_x509_certificate(&chain[0]).map_err(|error| bad(error.to_string()))?;
    let validity = leaf.validity();
    let not_before = instant(validity.not_before.timestamp());
    let not_after = instant(validity.not_after.timestamp());
    let expires = humantime::format_rfc3339_seconds(not_after).to_string();
    if now > not_after {
        return Err(TlsFileError::new(
            tls.table,
            "tls_cert_file",
            &tls.cert_file,
            Why::Expired { not_after: expires },
        ));
    }
    if now < not_before {
        return Err(TlsFileError::new(
            tls.table,
            "tls_cert_file",
            &tls.cert_file,
            Why::NotYetValid {
                not_before: humantime::format_rfc3339_seconds(not_before).to_string(),
            },
        ));
    }
    let days = not_after.duration_since(now).unwrap_or_default().as_secs() / 86_400;
    let mut lines = vec![format!(
        "{} tls: {}: {} ({} certificate{} in the chain), expires {expires} (in {days} days)",
        tls.table,
        tls.cert_file.display(),
        leaf.subject(),
        chain.len(),
        if chain.len() == 1 { "" } else { "s" },
    )];
    if files::readable_by_others(&tls.key_file) {
        lines.push(files::key_warning(tls.table, &tls.key_file));
    }
    if let Some((ca_file, auth)) = &tls.client_ca {
        let cas = files::certificates(tls.table, "tls_client_ca_file", ca_file)?.len();
        lines.push(format!(
            "{} tls: client certificates {} ({} CA certificate{} in {})",
            tls.table,
            match auth {
                ClientAuth::Optional => "optional",
                ClientAuth::Required => "required",
            },
            cas,
            if cas == 1 { "" } else { "s" },
            ca_file.display()
        ));
    }
    Ok(lines)
}

fn instant(timestamp: i64) -> SystemTime {
    match u64::try_from(timestamp) {
        Ok(seconds) => SystemTime::UNIX_EPOCH + Duration::from_secs(seconds),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}
