//! The `auth` key of a provider: how the proxy authenticates upstream.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

/// How the proxy authenticates to a provider.
///
/// In `proxy.toml`: `auth = "passthrough"`, `auth = "none"` or
/// `auth = { bearer_env = "VARIABLE" }`. The default is `"passthrough"`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Auth {
    /// Forward the client's own `Authorization` header.
    #[default]
    Passthrough,
    /// Send no `Authorization` header upstream.
    None,
    /// Send `Authorization: Bearer <value>`, the value read from the named
    /// environment variable. The variable is read by the proxy, not here.
    BearerEnv(String),
}

const EXPECTED: &str = r#""passthrough", "none" or a table { bearer_env = "VARIABLE" }"#;

impl<'de> Deserialize<'de> for Auth {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(AuthVisitor)
    }
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
        let mut variable = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != "bearer_env" {
                return Err(de::Error::custom(format!(
                    "unknown auth key `{key}`, the only key is `bearer_env`"
                )));
            }
            if variable.is_some() {
                return Err(de::Error::duplicate_field("bearer_env"));
            }
            let name: String = map.next_value()?;
            check_variable_name(&name).map_err(de::Error::custom)?;
            variable = Some(name);
        }
        variable
            .map(Auth::BearerEnv)
            .ok_or_else(|| de::Error::custom("an auth table needs `bearer_env = \"VARIABLE\"`"))
    }
}

/// An environment variable name must be non-empty and free of `=` and NUL,
/// which the environment cannot hold in a name.
fn check_variable_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("`bearer_env` must name an environment variable, not be empty".into());
    }
    if name.contains(['=', '\0']) {
        return Err(format!(
            "`bearer_env` = {name:?} is not a usable environment variable name (it contains `=` or NUL)"
        ));
    }
    Ok(())
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
    fn accepts_the_three_forms() {
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
    }
}
