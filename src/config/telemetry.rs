//! `[telemetry]` (docs/operations.md#tracing): the optional OpenTelemetry export of one span per
//! request. Every key is optional; without `otlp_endpoint` nothing is exported.

use reqwest::Url;
use serde::de::{Deserialize, Deserializer, Error};

/// `[telemetry] service_name` when left out.
const DEFAULT_SERVICE_NAME: &str = "replaygate";

/// The path OTLP/HTTP collectors take spans on.
const TRACES_PATH: &str = "/v1/traces";

/// `[telemetry]`: where the spans of requests go, if anywhere.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `otlp_endpoint`: the collector's OTLP/HTTP URL (`http://127.0.0.1:4318`), held as the
    /// URL spans are posted to (`/v1/traces` appended unless the path already ends so).
    /// `None`: no span is exported.
    #[serde(deserialize_with = "traces_url")]
    pub otlp_endpoint: Option<String>,
    /// `service_name`: the `service.name` the spans are exported under.
    #[serde(deserialize_with = "service_name")]
    pub service_name: String,
    /// `sample_ratio`: the share of traces started here that are exported, 0 to 1; a request
    /// that comes with a `traceparent` follows its sampled flag instead.
    #[serde(deserialize_with = "ratio")]
    pub(crate) sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            sample_ratio: 1.0,
        }
    }
}

/// An `http` or `https` URL with a host and no query, user or fragment, with the traces path
/// appended.
fn traces_url<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let written = String::deserialize(deserializer)?;
    let url = Url::parse(&written)
        .map_err(|e| D::Error::custom(format!("invalid otlp_endpoint `{written}`: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(D::Error::custom(format!(
            "otlp_endpoint `{written}` must be an http:// or https:// URL with a host"
        )));
    }
    if url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(D::Error::custom(format!(
            "otlp_endpoint `{written}` may not carry a query, a fragment or credentials"
        )));
    }
    let base = url.as_str().trim_end_matches('/');
    if base.ends_with(TRACES_PATH) {
        Ok(Some(base.to_owned()))
    } else {
        Ok(Some(format!("{base}{TRACES_PATH}")))
    }
}

/// A service name that is not empty.
fn service_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    if name.trim().is_empty() {
        return Err(D::Error::custom("service_name may not be empty"));
    }
    Ok(name)
}

/// A number from 0 to 1.
fn ratio<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    let ratio = f64::deserialize(deserializer)?;
    if !(0.0..=1.0).contains(&ratio) {
        return Err(D::Error::custom(format!(
            "sample_ratio must be from 0 to 1, not {ratio}"
        )));
    }
    Ok(ratio)
}

#[cfg(test)]
mod tests {
    use super::super::tests::assert_parse_error_at;
    use super::super::Config;
    use super::*;

    const MINIMAL: &str = "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n";

    fn telemetry(table: &str) -> TelemetryConfig {
        Config::from_toml(&format!("{MINIMAL}[telemetry]\n{table}"))
            .unwrap()
            .telemetry
    }

    #[test]
    fn telemetry_is_off_by_default() {
        let config = Config::from_toml(MINIMAL).unwrap();
        assert_eq!(config.telemetry, TelemetryConfig::default());
        assert_eq!(config.telemetry.otlp_endpoint, None);
        assert_eq!(config.telemetry.service_name, "replaygate");
        assert_eq!(config.telemetry.sample_ratio, 1.0);
    }

    #[test]
    fn the_endpoint_gets_the_traces_path_once() {
        for (written, url) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
            ("https://otel.example/otlp", "https://otel.example/otlp/v1/traces"),
            (
                "http://collector:4318/v1/traces",
                "http://collector:4318/v1/traces",
            ),
        ] {
            let config = telemetry(&format!("otlp_endpoint = \"{written}\"\n"));
            assert_eq!(config.otlp_endpoint.as_deref(), Some(url), "{written}");
        }
        let config = telemetry("service_name = \"gate-eu\"\nsample_ratio = 0.25\n");
        assert_eq!(
            (config.service_name.as_str(), config.sample_ratio),
            ("gate-eu", 0.25)
        );
    }

    #[test]
    fn unusable_values_and_unknown_keys_are_errors_with_their_position() {
        let at = |table: &str, column, needle| {
            assert_parse_error_at(&format!("{MINIMAL}[telemetry]\n{table}\n"), 4, column, needle);
        };
        at("otlp_endpoint = \"127.0.0.1:4318\"", 17, "otlp_endpoint");
        at(
            "otlp_endpoint = \"grpc://127.0.0.1:4317\"",
            17,
            "http:// or https://",
        );
        at("otlp_endpoint = \"http://u:p@127.0.0.1:4318\"", 17, "credentials");
        at("otlp_endpoint = \"http://127.0.0.1:4318/?a=1\"", 17, "query");
        at("service_name = \"  \"", 16, "may not be empty");
        at("sample_ratio = 1.5", 16, "from 0 to 1");
        at("sample_ratio = -0.1", 16, "from 0 to 1");
        at(
            "endpoint = \"http://127.0.0.1:4318\"",
            1,
            "unknown field `endpoint`",
        );
    }
}
