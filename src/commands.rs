//! `replaygate config check`, `replaygate keys new`, `replaygate profile show` and
//! `replaygate profile check` (docs/operations.md#commands): the commands that manage the
//! configuration and the files it names without serving.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::cli::{ConfigCheckArgs, KeysNewArgs, ProfileCheckArgs, ProfileShowArgs};
use crate::config::Config;
use crate::gate::ItemProfile;
use crate::keys;

/// Where the configuration comes from when none is named on the command line: `./proxy.toml`
/// when it exists, else (`None`) the default built into the binary. `explicit` is `--config`,
/// which also carries `$REPLAYGATE_CONFIG`.
pub(crate) fn config_path(explicit: Option<&Path>) -> Option<PathBuf> {
    match explicit {
        Some(path) => Some(path.to_owned()),
        None => Some(PathBuf::from("proxy.toml")).filter(|path| path.exists()),
    }
}

/// `replaygate config check`: loads the configuration as `serve` would and prints
/// `config ok: SOURCE: SUMMARY` (see `Config::summary`) to `out`. Returns the exit code: 0, or
/// 2 after printing the error (with its file, line and column) to `err`.
pub fn config_check(args: &ConfigCheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let loaded = match config_path(args.config.as_deref()) {
        Some(path) => Config::load(&path).map(|config| (config, path.display().to_string())),
        None => Config::embedded_default().map(|config| (config, "built-in default".to_owned())),
    };
    match loaded {
        Ok((config, source)) => {
            // The listener's TLS files, as the listener reads them (docs/operations.md#tls).
            let mut tls = Vec::new();
            for listener in [&config.server.tls, &config.admin.tls].into_iter().flatten() {
                match crate::tls::report::check(listener, SystemTime::now()) {
                    Ok(lines) => tls.extend(lines),
                    Err(error) => {
                        let _ = writeln!(err, "replaygate config check: {source}: {error}");
                        return 2;
                    }
                }
            }
            // A closed standard output is not a configuration error.
            let _ = writeln!(out, "config ok: {source}: {}", config.summary());
            for line in tls {
                let _ = writeln!(out, "{line}");
            }
            0
        }
        Err(error) => {
            let _ = writeln!(err, "replaygate config check: {error}");
            2
        }
    }
}

/// `replaygate profile show NAME`: prints the built-in item profile NAME's JSON to `out` (exit
/// 0), or to `err` that there is none by that name and which there are (exit 2).
pub fn profile_show(args: &ProfileShowArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    match ItemProfile::built_in_text(&args.name) {
        Some(text) => {
            let _ = out.write_all(text.as_bytes());
            0
        }
        None => {
            let known: Vec<&str> = ItemProfile::built_in_names().collect();
            let _ = writeln!(
                err,
                "replaygate profile show: no built-in item profile is called {:?}; the built-in profiles are: {}",
                args.name,
                known.join(", ")
            );
            2
        }
    }
}

/// `replaygate profile check FILE`: reads FILE as `item_profile = { file = "FILE" }` would and
/// prints `profile ok: FILE: SUMMARY` to `out` (exit 0), or the error, with the line and
/// column of an error in its JSON, to `err` (exit 2).
pub fn profile_check(args: &ProfileCheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    match crate::config::read_item_profile(&args.file) {
        Ok(profile) => {
            let _ = writeln!(
                out,
                "profile ok: {}: item profile `{}`: item types {}; part types {}",
                args.file.display(),
                profile.name(),
                or_none(profile.item_types().collect()),
                or_none(profile.part_types().collect()),
            );
            0
        }
        Err(message) => {
            let _ = writeln!(err, "replaygate profile check: {message}");
            2
        }
    }
}

/// Names joined with `, `, or `none`.
fn or_none(names: Vec<&str>) -> String {
    match names.is_empty() {
        true => "none".to_owned(),
        false => names.join(", "),
    }
}

/// `replaygate keys new --team NAME [--id ID] [--expires DATE]`: prints to `out`, in two lines,
///
/// ```text
/// rg-<64 hex digits>
/// keys = ["sha256:<64 hex digits>"]   # add to [teams.NAME]
/// ```
///
/// the new key (shown this once: replaygate keeps only its digest) and the `keys` line for
/// `proxy.toml`, whose digest is the SHA-256 of the whole key, `rg-` included. With `--id` or
/// `--expires` the entry is a table, `{ id = "ID", digest = "sha256:...", expires = "DATE" }`
/// (the expiry in UTC). A note on what to do with them goes to `err`. Returns the exit code:
/// 0; 2 when NAME, ID or DATE is not usable (as `proxy.toml` would refuse it, or DATE is
/// past); 1 when the operating system's random source cannot be read.
pub fn keys_new(args: &KeysNewArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let team = &args.team;
    if !keys::is_valid_team_name(team) {
        let _ = writeln!(
            err,
            "replaygate keys new: team name {team:?} may contain only ASCII letters, digits, `_` and `-`, \
             at most 64, and may not start with `-`"
        );
        return 2;
    }
    let Some(table) = table_fields(args, err) else {
        return 2;
    };
    let key = match keys::new_key() {
        Ok(key) => key,
        Err(error) => {
            let _ = writeln!(
                err,
                "replaygate keys new: cannot read the system's random source: {error}"
            );
            return 1;
        }
    };
    let digest = keys::format_digest(&keys::digest(&key));
    let entry = match table {
        None => format!("\"{digest}\""),
        Some(table) => {
            let mut fields = Vec::new();
            fields.extend(table.id.map(|id| format!("id = \"{id}\"")));
            fields.push(format!("digest = \"{digest}\""));
            fields.extend(table.expires.map(|expires| format!("expires = \"{expires}\"")));
            format!("{{ {} }}", fields.join(", "))
        }
    };
    if writeln!(out, "{key}\nkeys = [{entry}]   # add to [teams.{team}]").is_err() {
        return 1;
    }
    let _ = writeln!(
        err,
        "The first line is the client key, shown only this once: give it to the team's clients \
         (Authorization: Bearer KEY). Add the digest to `keys` in [teams.{team}] of proxy.toml \
         (next to any digests already there)."
    );
    0
}

/// The fields of a table entry besides its digest: `--id`, and `--expires` in UTC.
struct TableFields {
    id: Option<String>,
    expires: Option<String>,
}

/// `--id` and `--expires`, checked as `proxy.toml` checks them (and an expiry already past is
/// refused too): `Some(None)` when neither is given (the string form), `None` after writing
/// to `err` why one is unusable.
fn table_fields(args: &KeysNewArgs, err: &mut dyn Write) -> Option<Option<TableFields>> {
    if args.id.is_none() && args.expires.is_none() {
        return Some(None);
    }
    if let Some(id) = args.id.as_deref().filter(|id| !keys::is_valid_key_id(id)) {
        let _ = writeln!(
            err,
            "replaygate keys new: key id {id:?} may contain only ASCII letters, digits, `_`, `-` and `.`, \
             1 to {}",
            keys::MAX_KEY_ID_LEN
        );
        return None;
    }
    let expires = match args.expires.as_deref() {
        None => None,
        Some(text) => match keys::parse_expiry(text) {
            Some(expires) if expires > SystemTime::now() => Some(keys::format_expiry(expires)),
            Some(_) => {
                let _ = writeln!(err, "replaygate keys new: --expires {text:?} is already past");
                return None;
            }
            None => {
                let _ = writeln!(
                    err,
                    "replaygate keys new: --expires {text:?} is not an RFC 3339 date and time with its \
                     offset, like 2027-03-01T00:00:00Z"
                );
                return None;
            }
        },
    };
    Some(Some(TableFields {
        id: args.id.clone(),
        expires,
    }))
}
