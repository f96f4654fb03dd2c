//! The real-client corpus (`tests/fixtures/corpus/`) as the rules' tests read it.

use serde_json::Value;

use crate::gate::request::ItemsAt;

/// Every request body of the real-client corpus, as `(origin, where its items are, body)`.
pub(crate) fn corpus() -> Vec<(String, ItemsAt, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/corpus");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("the real-client corpus")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut bodies = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for (n, line) in std::fs::read_to_string(&file).unwrap().lines().enumerate() {
            let record: Value = serde_json::from_str(line).unwrap();
            let path = record["path"].as_str().unwrap().trim_end_matches('/');
            let at = if path.ends_with("/responses") || path.ends_with("/responses/compact") {
                ItemsAt::Input
            } else if path.ends_with("/conversations") {
                ItemsAt::Items
            } else if path.ends_with("/items") {
                ItemsAt::AddedItems
            } else {
                continue;
            };
            if record["body"].is_object() {
                bodies.push((format!("{name}#{}", n + 1), at, record["body"].to_string()));
            }
        }
    }
    bodies
}
