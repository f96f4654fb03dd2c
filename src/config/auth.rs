//! The `auth` key of a provider: how the proxy authenticates upstream.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

/// How the proxy authenticates to a provider.
///
/// In `proxy.toml`: `auth = "passthrough"`, `auth = "none"`,
/// `auth = { bearer_env = "VARIABLE" }`, `auth = { header_env = { name = "api-key", var = "VARIABLE" } }`
/// or `auth = { aws_sigv4 = { region = "us-east-1", service = "bedrock" } }`. The default is
/// `"passthrough"`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Auth {
    /// Forward the client's own `Authorization` header.
    #[default]
    Passthrough,
    /// Send no `Authorization` header upstream.
    None,
    /// Send `Authorization: Bearer <value>`, the value read from the named
    /// environment variable. The variable is read by the proxy, not here.
    BearerEnv(String),
    /// Send the value of an environment variable, as it is, in a header of its own (Azure
    /// OpenAI's `api-key`).
    HeaderEnv {
        /// The header's name, lowercase, checked to be a usable header name.
        name: String,
        /// The environment variable that holds the value.
        variable: String,
    },
    /// Sign every forwarded request with AWS Signature Version 4, with IAM credentials from
    /// the AWS environment variables.
    AwsSigV4 {
        /// The AWS region the signature is scoped to, e.g. `us-east-1`.
        region: String,
        /// The signing name of the service: `bedrock` for bedrock-runtime,
        /// `bedrock-mantle` for bedrock-mantle.
        service: String,
    },
}

/// The service name `aws_sigv4` signs for when `service` is left out.
pub(super) const DEFAULT_SIGV4_SERVICE: &str = "bedrock";

const EXPECTED: &str =
    r#""passthrough", "none" or a table with one key: bearer_env, header_env or aws_sigv4"#;

/// Headers a `header_env` key may not be sent in: the ones that frame the request or the
/// connection, which the proxy sets itself.
const RESERVED_HEADERS: [&str; 12] = [
    "connection",
    "content-length",
    "content-type",
    "expect",
    "host",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

impl Auth {
    /// Checks an `aws_sigv4` auth against the host of the provider's `base_url`: a Bedrock host
    /// names the region and the service a signature for it must be scoped to, and a signature
    /// scoped to another is refused by AWS. Other auths and other hosts pass.
    pub(crate) fn check_host(&self, host: &str) -> Result<(), String> {
        let Auth::AwsSigV4 { region, service } = self else {
            return Ok(());
        };
        let Some((host_service, host_region)) = bedrock_host(host) else {
            return Ok(());
        };
        if service != host_service {
            return Err(format!(
                "host {host} signs as service \"{host_service}\", not \"{service}\": \
                 write aws_sigv4 = {{ region = \"{host_region}\", service = \"{host_service}\" }}"
            ));
        }
        if region != host_region {
            return Err(format!(
                "host {host} is in region {host_region}, but aws_sigv4 signs for region {region}: \
                 write aws_sigv4 = {{ region = \"{host_region}\", service = \"{host_service}\" }}"
            ));
        }
        Ok(())
    }
}

/// The SigV4 service name and the region of an AWS Bedrock endpoint's host name:
/// `bedrock-runtime[-fips].REGION.amazonaws.com[.cn]` signs as `bedrock`,
/// `bedrock-mantle.REGION.api.aws` as `bedrock-mantle`.
fn bedrock_host(host: &str) -> Option<(&'static str, &str)> {
    let host = host.strip_suffix('.').unwrap_or(host);
    let mut labels = host.split('.');
    let (first, region) = (labels.next()?, labels.next()?);
    let rest: Vec<&str> = labels.collect();
    let service = match (first, rest.as_slice()) {
        ("bedrock-runtime" | "bedrock-runtime-fips", ["amazonaws", "com"] | ["amazonaws", "com", "cn"]) => {
            "bedrock"
        }
        ("bedrock-mantle", ["api", "aws"]) => "bedrock-mantle",
        _ => return None,
    };
    Some((service, region))
}

impl<'de> Deserialize<'de> for Auth {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(AuthVisitor)
    }
}

/// `header_env = { name = "HEADER", var = "VARIABLE" }`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderEnvTable {
    name: String,
    var: String,
}

/// `aws_sigv4 = { region = "REGION", service = "SERVICE" }`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AwsSigV4Table {
    region: String,
    #[serde(default = "default_service")]
    service: String,
}

fn default_service() -> String {
    DEFAULT_SIGV4_SERVICE.to_owned()
}

struct AuthVisitor;

impl<'de> Visitor<'de> for AuthVisitor {
    type Value = Auth;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTED)
    }

    fn visit_str<E: de::Error>(self, mode: &str) -> Result<Auth, E> {
        match mode {
            "passthrough" => Ok(Auth::Passthrough),
            "none" => Ok(Auth::None),
            other => Err(E::custom(format!(
                "unknown auth mode `{other}`, expected {EXPECTED}"
            ))),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Auth, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::custom(
                "an auth table needs `bearer_env = \"VARIABLE\"`, `header_env = { name = \"HEADER\", var = \"VARIABLE\" }` \
                 or `aws_sigv4 = { region = \"REGION\", service = \"SERVICE\" }`",
            ));
        };
        let auth = match key.as_str() {
            "bearer_env" => {
                let variable: String = map.next_value()?;
                check_variable_name("bearer_env", &variable).map_err(de::Error::custom)?;
                Auth::BearerEnv(variable)
            }
            "header_env" => {
                let table: HeaderEnvTable = map.next_value()?;
                check_variable_name("header_env var", &table.var).map_err(de::Error::custom)?;
                Auth::HeaderEnv {
                    name: check_header_name(&table.name).map_err(de::Error::custom)?,
                    variable: table.var,
                }
            }
            "aws_sigv4" => {
                let table: AwsSigV4Table = map.next_value()?;
                check_aws_word("region", &table.region).map_err(de::Error::custom)?;
                check_aws_word("service", &table.service).map_err(de::Error::custom)?;
                Auth::AwsSigV4 {
                    region: table.region,
                    service: table.service,
                }
            }
            other => return Err(unknown_key(other)),
        };
        if let Some(extra) = map.next_key::<String>()? {
            return Err(match extra.as_str() {
                "bearer_env" | "header_env" | "aws_sigv4" => de::Error::custom(format!(
                    "an auth table has one key; `{key}` and `{extra}` cannot go together"
                )),
                other => unknown_key(other),
            });
        }
        Ok(auth)
    }
}

fn unknown_key<E: de::Error>(key: &str) -> E {
    E::custom(format!(
        "unknown auth key `{key}`, expected `bearer_env`, `header_env` or `aws_sigv4`"
    ))
}

/// An environment variable name must be non-empty and free of `=` and NUL,
/// which the environment cannot hold in a name.
fn check_variable_name(key: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("`{key}` must name an environment variable, not be empty"));
    }
    if name.contains(['=', '\0']) {
        return Err(format!(
            "`{key}` = {name:?} is not a usable environment variable name (it contains `=` or NUL)"
        ));
    }
    Ok(())
}

/// A `header_env` name must be an HTTP header name (RFC 9110 token) that does not frame the
/// request; it is kept lowercase.
fn check_header_name(name: &str) -> Result<String, String> {
    let lower = name.to_ascii_lowercase();
    if http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
        return Err(format!(
            "header_env name {name:?} is not a usable HTTP header name"
        ));
    }
    if RESERVED_HEADERS.contains(&lower.as_str()) {
        return Err(format!(
            "header_env name {name:?} is a header replaygate sets itself; name the header the provider reads its key from"
        ));
    }
    Ok(lower)
}

/// An AWS region or service signing name: lowercase ASCII letters, digits and inner `-`.
fn check_aws_word(what: &str, text: &str) -> Result<(), String> {
    let usable = (1..=64).contains(&text.len())
        && !text.starts_with('-')
        && !text.ends_with('-')
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if usable {
        Ok(())
    } else {
        Err(format!(
            "aws_sigv4 {what} {text:?} is not usable: write it as AWS does, in lowercase letters, digits and `-` (e.g. \"us-east-1\", \"bedrock\")"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Holder {
        auth: Auth,
    }

    fn parse(text: &str) -> Result<Auth, String> {
        toml::from_str::<Holder>(text)
            .map(|holder| holder.auth)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn accepts_every_form() {
        assert_eq!(parse(r#"auth = "passthrough""#), Ok(Auth::Passthrough));
        assert_eq!(parse(r#"auth = "none""#), Ok(Auth::None));
        assert_eq!(
            parse(r#"auth = { bearer_env = "OPENAI_API_KEY" }"#),
            Ok(Auth::BearerEnv("OPENAI_API_KEY".into()))
        );
        assert_eq!(
            parse("[auth]\nbearer_env = \"KEY\""),
            Ok(Auth::BearerEnv("KEY".into()))
        );
        assert_eq!(
            parse(r#"auth = { header_env = { name = "API-Key", var = "AZURE_OPENAI_API_KEY" } }"#),
            Ok(Auth::HeaderEnv {
                name: "api-key".into(),
                variable: "AZURE_OPENAI_API_KEY".into()
            })
        );
        assert_eq!(
            parse(r#"auth = { aws_sigv4 = { region = "us-east-1", service = "bedrock-mantle" } }"#),
            Ok(Auth::AwsSigV4 {
                region: "us-east-1".into(),
                service: "bedrock-mantle".into()
            })
        );
        assert_eq!(
            parse("[auth.aws_sigv4]\nregion = \"eu-west-1\""),
            Ok(Auth::AwsSigV4 {
                region: "eu-west-1".into(),
                service: DEFAULT_SIGV4_SERVICE.into()
            })
        );
    }

    #[test]
    fn rejects_an_unknown_mode_with_its_position() {
        let error = parse(r#"auth = "bearer""#).unwrap_err();
        assert!(error.contains("line 1, column 8"), "{error}");
        assert!(error.contains("unknown auth mode `bearer`"), "{error}");
    }

    #[test]
    fn rejects_a_wrong_type() {
        let error = parse("auth = 3").unwrap_err();
        assert!(error.contains("expected \"passthrough\""), "{error}");
    }

    #[test]
    fn rejects_an_unknown_key() {
        let error = parse(r#"auth = { bearer = "KEY" }"#).unwrap_err();
        assert!(error.contains("unknown auth key `bearer`"), "{error}");
    }

    #[test]
    fn rejects_an_extra_key_next_to_bearer_env() {
        let error = parse(r#"auth = { bearer_env = "KEY", header = "x" }"#).unwrap_err();
        assert!(error.contains("unknown auth key `header`"), "{error}");
        let error =
            parse(r#"auth = { bearer_env = "KEY", aws_sigv4 = { region = "us-east-1" } }"#).unwrap_err();
        assert!(error.contains("cannot go together"), "{error}");
    }

    #[test]
    fn rejects_an_empty_table() {
        let error = parse("auth = {}").unwrap_err();
        assert!(error.contains("needs `bearer_env"), "{error}");
    }

    #[test]
    fn rejects_unusable_variable_names() {
        let error = parse(r#"auth = { bearer_env = "" }"#).unwrap_err();
        assert!(error.contains("not be empty"), "{error}");
        let error = parse(r#"auth = { bearer_env = "A=B" }"#).unwrap_err();
        assert!(
            error.contains("not a usable environment variable name"),
            "{error}"
        );
        let error = parse(r#"auth = { bearer_env = 7 }"#).unwrap_err();
        assert!(error.contains("invalid type"), "{error}");
        let error = parse(r#"auth = { header_env = { name = "api-key", var = "" } }"#).unwrap_err();
        assert!(error.contains("`header_env var` must name"), "{error}");
    }

    #[test]
    fn rejects_unusable_header_names_and_missing_keys() {
        for (name, want) in [
            ("api key", "not a usable HTTP header name"),
            ("", "not a usable HTTP header name"),
            ("é", "not a usable HTTP header name"),
            ("Host", "sets itself"),
            ("content-length", "sets itself"),
            ("Transfer-Encoding", "sets itself"),
        ] {
            let text = format!(r#"auth = {{ header_env = {{ name = "{name}", var = "K" }} }}"#);
            let error = parse(&text).unwrap_err();
            assert!(error.contains(want), "{name}: {error}");
        }
        let error = parse(r#"auth = { header_env = { name = "api-key" } }"#).unwrap_err();
        assert!(error.contains("missing field `var`"), "{error}");
        let error = parse(r#"auth = { header_env = { name = "a", var = "K", value = "x" } }"#).unwrap_err();
        assert!(error.contains("unknown field `value`"), "{error}");
    }

    #[test]
    fn rejects_unusable_regions_and_services() {
        let error = parse(r#"auth = { aws_sigv4 = { service = "bedrock" } }"#).unwrap_err();
        assert!(error.contains("missing field `region`"), "{error}");
        for table in [
            r#"{ region = "US-EAST-1" }"#,
            r#"{ region = "" }"#,
            r#"{ region = "us east 1" }"#,
            r#"{ region = "us-east-1", service = "bedrock/x" }"#,
            r#"{ region = "us-east-1", service = "-bedrock" }"#,
        ] {
            let error = parse(&format!("auth = {{ aws_sigv4 = {table} }}")).unwrap_err();
            assert!(error.contains("is not usable"), "{table}: {error}");
        }
        let error = parse(r#"auth = { aws_sigv4 = { region = "us-east-1", key = "x" } }"#).unwrap_err();
        assert!(error.contains("unknown field `key`"), "{error}");
    }

    fn sigv4(region: &str, service: &str) -> Auth {
        Auth::AwsSigV4 {
            region: region.into(),
            service: service.into(),
        }
    }

    #[test]
    fn a_bedrock_host_fixes_the_service_and_region() {
        for (host, auth) in [
            (
                "bedrock-runtime.us-east-1.amazonaws.com",
                sigv4("us-east-1", "bedrock"),
            ),
            (
                "bedrock-runtime-fips.us-west-2.amazonaws.com",
                sigv4("us-west-2", "bedrock"),
            ),
            (
                "bedrock-runtime.cn-north-1.amazonaws.com.cn",
                sigv4("cn-north-1", "bedrock"),
            ),
            (
                "bedrock-mantle.eu-west-1.api.aws",
                sigv4("eu-west-1", "bedrock-mantle"),
            ),
            ("127.0.0.1", sigv4("us-east-1", "bedrock-mantle")),
            ("example.com", sigv4("us-east-1", "anything")),
        ] {
            assert_eq!(auth.check_host(host), Ok(()), "{host}");
        }
        let error = sigv4("us-east-1", "bedrock")
            .check_host("bedrock-mantle.us-east-1.api.aws")
            .unwrap_err();
        assert!(error.contains("service = \"bedrock-mantle\""), "{error}");
        let error = sigv4("us-east-1", "bedrock-mantle")
            .check_host("bedrock-runtime.us-east-1.amazonaws.com")
            .unwrap_err();
        assert!(error.contains("signs as service \"bedrock\""), "{error}");
        let error = sigv4("us-west-2", "bedrock")
            .check_host("bedrock-runtime.us-east-1.amazonaws.com")
            .unwrap_err();
        assert!(error.contains("region = \"us-east-1\""), "{error}");
        assert_eq!(
            Auth::BearerEnv("K".into()).check_host("bedrock-mantle.us-east-1.api.aws"),
            Ok(())
        );
    }
}
