//! The docs say what the code does: every reason code the gate has is a heading of
//! `docs/reasons.md` and a row of the README's table of reasons, and every key `proxy.toml`
//! accepts is in `docs/configuration.md`, under the heading of its table. The keys are read
//! from the configuration's own parser: a table given a key it does not know answers with the
//! keys it does.

use std::collections::BTreeSet;

use replaygate::config::Config;
use replaygate::gate::Reason;

fn read(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

fn reason_codes() -> BTreeSet<String> {
    Reason::ALL
        .iter()
        .map(|reason| reason.as_str().to_owned())
        .collect()
}

/// The `## ` headings of `docs/reasons.md`: each is a reason code.
fn reasons_doc_headings(doc: &str) -> Vec<String> {
    doc.lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(|heading| heading.trim().to_owned())
        .collect()
}

/// The reasons the README's table links to `docs/reasons.md`: a table row (a line starting
/// with `|`) whose first cell is ``[`code`](docs/reasons.md#code)``.
fn readme_table_reasons(readme: &str) -> Vec<String> {
    readme
        .lines()
        .filter_map(|line| line.strip_prefix("| [`"))
        .filter_map(|rest| {
            let (code, link) = rest.split_once("`](docs/reasons.md#")?;
            let (anchor, _) = link.split_once(')')?;
            assert_eq!(code, anchor, "the README's row for `{code}` links to #{anchor}");
            Some(code.to_owned())
        })
        .collect()
}

fn assert_same(what: &str, listed: &[String], codes: &BTreeSet<String>) {
    let set: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(set.len(), listed.len(), "{what} lists a reason twice: {listed:?}");
    let missing: Vec<_> = codes.difference(&set).collect();
    let extra: Vec<_> = set.difference(codes).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what} and the gate's reasons differ: missing {missing:?}, not a reason {extra:?}"
    );
}

#[test]
fn every_reason_has_its_heading_in_docs_reasons_and_its_row_in_the_readme() {
    let codes = reason_codes();
    assert_eq!(codes.len(), Reason::ALL.len());
    assert_same(
        "docs/reasons.md's `## ` headings",
        &reasons_doc_headings(&read("docs/reasons.md")),
        &codes,
    );
    assert_same(
        "the README's table of reasons",
        &readme_table_reasons(&read("README.md")),
        &codes,
    );
}

#[test]
fn the_reason_lists_notice_a_missing_or_extra_code() {
    let codes = reason_codes();
    let doc = read("docs/reasons.md");
    let without = doc.replace("## call_id_mismatch\n", "### call_id_mismatch\n");
    let missing = std::panic::catch_unwind(|| assert_same("doc", &reasons_doc_headings(&without), &codes));
    assert!(missing.is_err(), "a reason without its heading went unnoticed");
    let mut extra = reasons_doc_headings(&doc);
    extra.push("no_such_reason".to_owned());
    let extra = std::panic::catch_unwind(|| assert_same("doc", &extra, &codes));
    assert!(extra.is_err(), "a heading that is no reason went unnoticed");
}

/// A key no table of `proxy.toml` has.
const PROBE: &str = "zz_probe";

/// Each table of `proxy.toml`: a configuration holding [`PROBE`] in it, and the `## ` heading
/// of `docs/configuration.md` its keys are documented under. Nested tables (an `auth`, an
/// `item_profile` file, a key's table, a `budget`) are documented under the table holding them.
const TABLES: &[(&str, &str)] = &[
    ("zz_probe = 1\n", "The file"),
    ("[server]\nzz_probe = 1\n", "`[server]`"),
    ("[admin]\nzz_probe = 1\n", "`[admin]`"),
    ("[log]\nzz_probe = 1\n", "`[log]`"),
    ("[gate]\nzz_probe = 1\n", "`[gate]`"),
    ("[telemetry]\nzz_probe = 1\n", "`[telemetry]`"),
    (
        "[providers.p]\nbase_url = \"http://127.0.0.1:9/v1\"\nzz_probe = 1\n",
        "`[providers.NAME]`",
    ),
    (
        "[providers.p]\nbase_url = \"http://127.0.0.1:9/v1\"\nauth = { zz_probe = \"X\" }\n",
        "`[providers.NAME]`",
    ),
    (
        "[providers.p]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         auth = { header_env = { name = \"api-key\", var = \"X\", zz_probe = 1 } }\n",
        "`[providers.NAME]`",
    ),
    (
        "[providers.p]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         auth = { aws_sigv4 = { region = \"us-east-1\", zz_probe = 1 } }\n",
        "`[providers.NAME]`",
    ),
    (
        "[providers.p]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         item_profile = { file = \"p.json\", zz_probe = 1 }\n",
        "`[providers.NAME]`",
    ),
    (
        "[[routes]]\nmodel = \"m\"\nprovider = \"p\"\nzz_probe = 1\n",
        "`[[routes]]`",
    ),
    ("[teams.t]\nkeys = []\nzz_probe = 1\n", "`[teams.NAME]`"),
    (
        "[teams.t]\nkeys = [{ digest = \"sha256:00\", zz_probe = 1 }]\n",
        "`[teams.NAME]`",
    ),
    (
        "[teams.t]\nkeys = []\nbudget = { zz_probe = 1 }\n",
        "`[teams.NAME]`",
    ),
    (
        "[teams.t]\nkeys = [{ digest = \"sha256:00\", budget = { zz_probe = 1 } }]\n",
        "`[teams.NAME]`",
    ),
    ("[audit]\npath = \"a.jsonl\"\nzz_probe = 1\n", "`[audit]`"),
    ("[state]\nzz_probe = 1\n", "`[state]`"),
    ("[ledger]\nzz_probe = 1\n", "`[ledger]`"),
    ("[prices.\"m\"]\nzz_probe = 1\n", "`[prices.\"GLOB\"]`"),
    ("[usage]\nzz_probe = 1\n", "`[usage]`"),
];

/// The keys a table accepts, as its parser names them when given [`PROBE`]: the words in
/// backquotes after "expected" in the error.
fn accepted_keys(config: &str) -> Vec<String> {
    let error = match Config::from_toml(config) {
        Ok(_) => panic!("a configuration holding `{PROBE}` loaded:\n{config}"),
        Err(error) => error.to_string(),
    };
    let message = error
        .split_once(&format!("`{PROBE}`"))
        .and_then(|(_, after)| after.split_once("expected"))
        .map(|(_, expected)| expected)
        .unwrap_or_else(|| panic!("no list of expected keys in the error for\n{config}\n{error}"));
    let keys: Vec<String> = message.split('`').skip(1).step_by(2).map(str::to_owned).collect();
    assert!(
        !keys.is_empty(),
        "no key named in the error for\n{config}\n{error}"
    );
    keys
}

/// The text under the `## ` heading containing `heading`, up to the next `## ` heading.
fn section<'d>(doc: &'d str, heading: &str) -> &'d str {
    let start = doc
        .match_indices("\n## ")
        .map(|(at, _)| at + 1)
        .find(|&at| {
            doc[at..]
                .lines()
                .next()
                .is_some_and(|line| line.contains(heading))
        })
        .unwrap_or_else(|| panic!("docs/configuration.md has no `## ` heading with {heading}"));
    let end = doc[start + 3..]
        .find("\n## ")
        .map_or(doc.len(), |at| start + 3 + at);
    &doc[start..end]
}

/// The keys of `config`'s table that `doc` does not name (as `` `key` ``, or for a table
/// `` `[key `` / `` `[[key ``) under `heading`.
fn undocumented(doc: &str, config: &str, heading: &str) -> Vec<String> {
    let text = section(doc, heading);
    accepted_keys(config)
        .into_iter()
        .filter(|key| {
            ![format!("`{key}`"), format!("`[{key}"), format!("`[[{key}")]
                .iter()
                .any(|written| text.contains(written.as_str()))
        })
        .collect()
}

#[test]
fn every_key_proxy_toml_accepts_is_in_docs_configuration() {
    let doc = read("docs/configuration.md");
    let mut missing = Vec::new();
    for (config, heading) in TABLES {
        for key in undocumented(&doc, config, heading) {
            missing.push(format!("{heading} {key}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not document {missing:?}"
    );
}

#[test]
fn a_key_left_out_of_docs_configuration_is_noticed() {
    let doc = read("docs/configuration.md");
    let (config, heading) = ("[ledger]\nzz_probe = 1\n", "`[ledger]`");
    assert!(accepted_keys(config).contains(&"max_chain".to_owned()));
    assert!(undocumented(&doc, config, heading).is_empty());
    let without = doc.replace("`max_chain`", "max_chain");
    assert_eq!(undocumented(&without, config, heading), ["max_chain"]);
}

/// What a profile text cites that a user cannot open: an outside contract (its sections, or a
/// `CONTRACT.md`), and `docs/FILE.md#anchor` links whose file has no such heading.
fn unopenable_citations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let lower = text.to_lowercase();
    if lower.contains("contract") {
        found.push("an outside contract".to_owned());
    }
    let mut rest = text;
    while let Some(at) = rest.find("docs/") {
        let link: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '#' | '-' | '_'))
            .collect();
        rest = &rest[at + link.len().max(5)..];
        let Some((file, anchor)) = link.split_once('#') else {
            continue;
        };
        let headings = std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR")))
            .map(|doc| {
                doc.lines()
                    .filter_map(|line| line.strip_prefix('#'))
                    .map(|heading| {
                        heading
                            .trim_start_matches('#')
                            .trim()
                            .to_lowercase()
                            .chars()
                            .filter_map(|c| match c {
                                ' ' => Some('-'),
                                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                                _ => None,
                            })
                            .collect::<String>()
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        if !headings.iter().any(|heading| heading == anchor) {
            found.push(link);
        }
    }
    found
}

/// The texts of the built-in item profiles (which the violations' messages quote) cite this
/// project's docs, never an outside contract, and every docs link in them names a heading.
#[test]
fn the_built_in_profiles_cite_only_what_a_user_can_open() {
    let dir = format!("{}/crates/replaygate-core/profiles", env!("CARGO_MANIFEST_DIR"));
    let mut profiles = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "json") {
            profiles += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            let cited = unopenable_citations(&text);
            assert!(cited.is_empty(), "{}: {cited:?}", path.display());
        }
    }
    assert!(profiles >= 2, "{profiles} profiles in {dir}");
    // The check notices what it is for.
    assert_eq!(
        unopenable_citations("missing call_id (contract section 5a)"),
        ["an outside contract"]
    );
    assert_eq!(
        unopenable_citations("see docs/reasons.md#item_value, docs/reasons.md#no_such_reason"),
        ["docs/reasons.md#no_such_reason"]
    );
}
