//! Certificates made for one test run with rcgen: a CA, and the server and client certificates
//! it signs, written as PEM files (a TLS `redis-server` reads files).

use std::path::{Path, PathBuf};

use rcgen::{date_time_ymd, BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// A certificate authority of the test's own.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM files.
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// Writes the CA certificate to `dir/{stem}.pem`.
    pub fn write(&self, dir: &Path, stem: &str) -> PathBuf {
        let path = dir.join(format!("{stem}.pem"));
        std::fs::write(&path, self.issuer.pem()).unwrap();
        path
    }

    /// A certificate for `names` (DNS names, or IP addresses written as such) signed by this
    /// CA, written to `dir/{stem}.pem` and `dir/{stem}.key`.
    pub fn issue(&self, names: &[&str], dir: &Path, stem: &str) -> Issued {
        self.issue_with(names, dir, stem, |_| {})
    }

    /// As [`TestCa::issue`], for a certificate that expired on 1 January 2020.
    pub fn issue_expired(&self, names: &[&str], dir: &Path, stem: &str) -> Issued {
        self.issue_with(names, dir, stem, |params| {
            params.not_before = date_time_ymd(2019, 1, 1);
            params.not_after = date_time_ymd(2020, 1, 1);
        })
    }

    fn issue_with(
        &self,
        names: &[&str],
        dir: &Path,
        stem: &str,
        adjust: impl FnOnce(&mut CertificateParams),
    ) -> Issued {
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, stem);
        adjust(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let issued = Issued {
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}.key")),
        };
        std::fs::write(&issued.cert, cert.pem()).unwrap();
        std::fs::write(&issued.key, key.serialize_pem()).unwrap();
        issued
    }
}

impl TestCa {
    /// As [`TestCa::issue`], for a certificate valid only from 1 January 2100.
    #[allow(dead_code)] // the listener's TLS tests use it, the library's do not
    pub fn issue_not_yet_valid(&self, names: &[&str], dir: &Path, stem: &str) -> Issued {
        self.issue_with(names, dir, stem, |params| {
            params.not_before = date_time_ymd(2100, 1, 1);
            params.not_after = date_time_ymd(2101, 1, 1);
        })
    }
}

impl TestCa {
    /// A client certificate with these URI subject alternative names and common name `stem`.
    #[allow(dead_code)] // the listener's TLS tests use it, the library's do not
    pub fn issue_uris(&self, uris: &[&str], dir: &Path, stem: &str) -> Issued {
        let uris: Vec<rcgen::SanType> = uris
            .iter()
            .map(|uri| rcgen::SanType::URI((*uri).try_into().unwrap()))
            .collect();
        self.issue_with(&[], dir, stem, |params| params.subject_alt_names = uris)
    }
}

/// A self-signed certificate (DER) with these URI and DNS subject alternative names and, if
/// given, common name: a client certificate as the listener hands it on once verified.
#[allow(dead_code)] // the teams' tests use it, the listener's do not
pub fn self_signed_der(uris: &[&str], dns: &[&str], cn: Option<&str>) -> Vec<u8> {
    let mut params = CertificateParams::default();
    params.subject_alt_names = uris
        .iter()
        .map(|uri| rcgen::SanType::URI((*uri).try_into().unwrap()))
        .chain(
            dns.iter()
                .map(|name| rcgen::SanType::DnsName((*name).try_into().unwrap())),
        )
        .collect();
    let mut subject = rcgen::DistinguishedName::new();
    if let Some(cn) = cn {
        subject.push(DnType::CommonName, cn);
    }
    params.distinguished_name = subject;
    let key = KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}
