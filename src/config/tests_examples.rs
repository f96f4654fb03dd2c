//! The provider examples commented out in the repository's `proxy.toml` load once written out.

use super::*;

/// The keys an example provider block may set.
const PROVIDER_KEYS: [&str; 7] = [
    "base_url",
    "auth",
    "namespaces",
    "connect_timeout_ms",
    "read_timeout_ms",
    "encrypted_content_scope",
    "item_profile",
];

/// Every `# [providers.NAME]` block of the file, uncommented: the table line and the
/// `# KEY = VALUE` lines right after it.
fn provider_examples(text: &str) -> Vec<String> {
    let mut examples = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if !(line.starts_with("# [providers.") && line.ends_with(']')) {
            continue;
        }
        let mut block = format!("{}\n", &line[2..]);
        while let Some(next) = lines.next_if(|next| {
            PROVIDER_KEYS
                .iter()
                .any(|key| next.starts_with(&format!("# {key} = ")))
        }) {
            block.push_str(&next[2..]);
            block.push('\n');
        }
        examples.push(block);
    }
    examples
}

#[test]
fn every_commented_provider_example_loads() {
    let examples = provider_examples(EMBEDDED_DEFAULT);
    let mut loaded = BTreeMap::new();
    for example in &examples {
        let text = format!("{EMBEDDED_DEFAULT}\n{example}");
        let config = Config::from_toml(&text).unwrap_or_else(|e| panic!("{example}: {e}"));
        assert_eq!(config.providers.len(), 4, "{example}");
        let (name, provider) = config
            .providers
            .into_iter()
            .find(|(name, _)| !["openai", "bedrock", "bedrock-openai"].contains(&name.as_str()))
            .unwrap();
        loaded.insert(name, provider);
    }
    let auths: Vec<(&str, &str, &Auth)> = loaded
        .iter()
        .map(|(name, p)| (name.as_str(), p.base_url.as_str(), &p.auth))
        .collect();
    let sigv4 = |region: &str, service: &str| Auth::AwsSigV4 {
        region: region.into(),
        service: service.into(),
    };
    assert_eq!(
        auths,
        [
            (
                "azure",
                "https://resource.openai.azure.com/openai/v1",
                &Auth::HeaderEnv {
                    name: "api-key".into(),
                    variable: "AZURE_OPENAI_API_KEY".into()
                }
            ),
            (
                "bedrock-mantle",
                "https://bedrock-mantle.us-east-1.api.aws/v1",
                &sigv4("us-east-1", "bedrock-mantle")
            ),
            (
                "bedrock-runtime",
                "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1",
                &sigv4("us-east-1", "bedrock")
            ),
            ("ollama", "http://127.0.0.1:11434/v1", &Auth::None),
            (
                "openrouter",
                "https://openrouter.ai/api/v1",
                &Auth::BearerEnv("OPENROUTER_API_KEY".into())
            ),
        ]
    );
    for bedrock in ["bedrock-mantle", "bedrock-runtime"] {
        assert_eq!(loaded[bedrock].namespaces(), ["bedrock"]);
        assert_eq!(
            loaded[bedrock].encrypted_content_scope,
            EncryptedContentScope::Model
        );
    }
}

#[test]
fn a_bedrock_host_signed_for_the_wrong_service_or_region_is_refused() {
    let text = "[providers.b]\nbase_url = \"https://bedrock-mantle.us-east-1.api.aws/v1\"\nauth = { aws_sigv4 = { region = \"us-east-1\" } }\n";
    super::tests::assert_invalid_at(text, 3, 8, "service = \"bedrock-mantle\"");
    let text = "[providers.b]\nbase_url = \"https://bedrock-runtime.eu-west-1.amazonaws.com/openai/v1\"\nauth = { aws_sigv4 = { region = \"us-east-1\" } }\n";
    super::tests::assert_invalid_at(text, 3, 8, "region = \"eu-west-1\"");
    let text = "[providers.b]\nbase_url = \"https://bedrock-runtime.eu-west-1.amazonaws.com/openai/v1\"\nauth = { aws_sigv4 = { region = \"eu-west-1\" } }\n";
    assert!(Config::from_toml(text).is_ok());
}
