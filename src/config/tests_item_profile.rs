//! `item_profile = { file = "..." }`: an operator's item profile, read and checked with the
//! configuration.

use super::*;

/// The example profile docs/item-profiles.md shows.
const LOCAL: &str = include_str!("../../tests/fixtures/profiles/local.json");

/// A provider whose `item_profile` is `value` (line 4 of the text, the value at column 16).
fn provider(value: &str) -> String {
    format!(
        "[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\nauth = \"none\"\nitem_profile = {value}\n"
    )
}

/// A directory holding `proxy.toml` with `text` and the files in `files`.
fn config_dir(text: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Loads a configuration whose provider reads `content` as `profiles/p.json`; returns the
/// error, checked to point at the `file` value and to name the file.
fn profile_error(content: &str) -> String {
    let text = provider(r#"{ file = "profiles/p.json" }"#);
    let (dir, path) = config_dir(&text, &[("profiles/p.json", content)]);
    let message = Config::load(&path).unwrap_err().to_string();
    let place = format!("{}: invalid configuration at line 4, column 25: ", path.display());
    assert!(message.starts_with(&place), "{message}");
    let file = std::path::absolute(dir.path()).unwrap().join("profiles/p.json");
    assert!(message.contains(&file.display().to_string()), "{message}");
    message
}

#[test]
fn a_profile_file_loads_relative_to_the_config_and_is_named_for_watching() {
    let text = provider(r#"{ file = "profiles/local.json" }"#);
    let (dir, path) = config_dir(&text, &[("profiles/local.json", LOCAL)]);
    let config = Config::load(&path).unwrap();
    let local = &config.providers["local"];
    let profile = local.item_profile.as_ref().unwrap();
    assert_eq!(profile.name(), "local");
    let call = profile.item("function_call").unwrap();
    assert!(call.refused("parsed_arguments").is_some());
    assert_eq!(
        call.accepted("name").unwrap().pattern().unwrap().as_str(),
        "^[a-zA-Z0-9_]+$"
    );
    let file = std::path::absolute(dir.path())
        .unwrap()
        .join("profiles/local.json");
    assert_eq!(local.item_profile_file.as_deref(), Some(file.as_path()));
    // A built-in profile names no file.
    let config = Config::from_toml(&provider("\"openai\"")).unwrap();
    let openai = &config.providers["local"];
    assert_eq!(openai.item_profile.as_ref().unwrap().name(), "openai");
    assert_eq!(openai.item_profile_file, None);
}

#[test]
fn a_json_error_names_the_files_line_and_column() {
    let message = profile_error("{\n \"profile\": \"p\",\n \"source\": \"s\"\n \"items\": {}\n}");
    assert!(message.contains("is not a valid item profile"), "{message}");
    assert!(message.contains("line 4 column 2"), "{message}");
    let message = profile_error("");
    assert!(message.contains("EOF while parsing"), "{message}");
}

#[test]
fn unknown_kinds_rules_members_and_names_written_twice_are_errors() {
    let with_rule = |rule: &str| {
        LOCAL.replace(
            r#""call_id": {"types": ["string"], "max_length": 40,"#,
            &format!(r#""call_id": {{{rule}"#),
        )
    };
    for (content, says) in [
        (with_rule(r#""types": ["text"], "#), "unknown type `text`"),
        (with_rule(r#""max_chars": 40, "#), "unknown field `max_chars`"),
        (
            LOCAL.replace("\"parts\": {}", "\"parts\": {},\n \"rules\": {\"no_tool_output\": \"s\"}"),
            "unknown rule `no_tool_output`",
        ),
        (
            LOCAL.replace(
                "\"function_call\": {",
                "\"web_search_call\": {\"accepted\": {}, \"required\": {}, \"refused\": {}},\n  \"function_call\": {",
            ),
            "not a portable item type",
        ),
        (
            LOCAL.replace(
                "   \"refused\": {\n",
                "   \"refused\": {\n    \"parsed_arguments\": \"again\",\n",
            ),
            "`parsed_arguments` is named twice in one object at line 21 column 22",
        ),
        (
            LOCAL.replace("^[a-zA-Z0-9_]+$", "^(\\\\w+)\\\\1$"),
            "not one the linear-time regex engine takes",
        ),
    ] {
        let message = profile_error(&content);
        assert!(message.contains(says), "{says}: {message}");
    }
}

#[test]
fn a_file_over_the_size_cap_is_refused_without_reading_it() {
    let text = provider(r#"{ file = "profiles/p.json" }"#);
    let (dir, path) = config_dir(&text, &[("profiles/p.json", "")]);
    // 100 MB, sparse: nothing is written, and nothing should be read.
    let file = std::fs::File::options()
        .write(true)
        .open(dir.path().join("profiles/p.json"))
        .unwrap();
    file.set_len(100_000_000).unwrap();
    let started = std::time::Instant::now();
    let message = Config::load(&path).unwrap_err().to_string();
    assert!(
        message.contains("it is 100000000 bytes; an item profile may be at most 8 MiB"),
        "{message}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Just over the cap, written out.
    std::fs::write(dir.path().join("profiles/p.json"), " ".repeat((8 << 20) + 1)).unwrap();
    let message = Config::load(&path).unwrap_err().to_string();
    assert!(message.contains("at most 8 MiB"), "{message}");
}

#[test]
fn a_missing_file_an_empty_path_and_an_unknown_key_are_errors() {
    let text = provider(r#"{ file = "profiles/none.json" }"#);
    let (_dir, path) = config_dir(&text, &[]);
    let message = Config::load(&path).unwrap_err().to_string();
    assert!(
        message.contains("cannot read item profile file") && message.contains("none.json"),
        "{message}"
    );
    let message = Config::from_toml(&provider(r#"{ file = "" }"#))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("item_profile file must name a file"),
        "{message}"
    );
    let message = Config::from_toml(&provider(r#"{ path = "p.json" }"#))
        .unwrap_err()
        .to_string();
    assert!(message.contains("unknown field `path`"), "{message}");
    let message = Config::from_toml(&provider("7")).unwrap_err().to_string();
    assert!(message.contains("a built-in item profile's name"), "{message}");
    let message = Config::from_toml(&provider("\"anthropic\""))
        .unwrap_err()
        .to_string();
    assert!(message.contains("unknown item profile `anthropic`"), "{message}");
}
