//! `replaygate check`: gate request bodies offline and print one verdict per body.

use std::io::{self, BufRead, Read, Write};
use std::path::Path;

use serde::Serialize;

use crate::cli::CheckArgs;
use crate::config::Config;
use crate::gate::{
    parse, strip, Gate, ItemProfile, Policy, ProviderProfile, SchemaLimits, Target, Violation,
};
use crate::proxy::teams::Teams;

/// Every body was allowed.
pub(crate) const EXIT_ALLOWED: u8 = 0;
/// At least one body had a violation whose action is `reject`.
pub(crate) const EXIT_VIOLATIONS: u8 = 1;
/// Usage, configuration or JSON error.
pub(crate) const EXIT_ERROR: u8 = 2;

/// One body's verdict, as printed.
#[derive(Debug, Serialize)]
struct Printed<'a> {
    allowed: bool,
    provider: &'a str,
    violations: &'a [Violation],
}

/// Runs the command and returns its exit code; messages for people go to `errors`.
pub fn run(args: &CheckArgs, stdin: impl Read, out: &mut impl Write, errors: &mut impl Write) -> u8 {
    match check(args, stdin, out, errors) {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(errors, "replaygate check: {message}");
            EXIT_ERROR
        }
    }
}

fn check(
    args: &CheckArgs,
    stdin: impl Read,
    out: &mut impl Write,
    errors: &mut impl Write,
) -> Result<u8, String> {
    let (profile, limits, mut policy) = profile(args)?;
    // Offline, every violation is printed: there is no answer whose size to bound.
    policy.max_listed = usize::MAX;
    let gate = Gate::new(limits);
    let target = Target::new(&profile, &policy).offline();
    let input = open(&args.input, stdin)?;
    let mut worst = EXIT_ALLOWED;
    let mut judge = |body: &[u8], origin: &str| -> Result<(), String> {
        let judged = parse(body).and_then(|request| {
            let verdict = gate.judge(&request, &target)?;
            let forwarded = match args.repaired && verdict.is_allowed() {
                true => strip::strip(body, &request, &verdict)?.map(|cut| cut.body),
                false => None,
            };
            Ok((verdict, forwarded))
        });
        match judged {
            Ok((verdict, forwarded)) => {
                if !verdict.is_allowed() {
                    worst = worst.max(EXIT_VIOLATIONS);
                }
                let printed = Printed {
                    allowed: verdict.is_allowed(),
                    provider: profile.name(),
                    violations: &verdict.violations,
                };
                let line = serde_json::to_string(&printed).map_err(|e| e.to_string())?;
                match (args.repaired, verdict.is_allowed()) {
                    (false, _) => writeln!(out, "{line}"),
                    (true, true) => {
                        let forwarded = forwarded.as_deref().unwrap_or(body);
                        out.write_all(forwarded).and_then(|()| writeln!(out))
                    }
                    (true, false) => writeln!(errors, "{line}"),
                }
                .map_err(|e| e.to_string())
            }
            Err(error) => {
                worst = EXIT_ERROR;
                writeln!(errors, "replaygate check: {origin}: {}: {error}", error.code())
                    .map_err(|e| e.to_string())
            }
        }
    };
    if args.jsonl {
        for (number, line) in input.lines().enumerate() {
            let line = line.map_err(|e| format!("reading {}: {e}", args.input))?;
            if !line.trim().is_empty() {
                judge(line.as_bytes(), &format!("line {}", number + 1))?;
            }
        }
    } else {
        let mut body = Vec::new();
        let mut input = input;
        input
            .read_to_end(&mut body)
            .map_err(|e| format!("reading {}: {e}", args.input))?;
        judge(&body, &args.input)?;
    }
    Ok(worst)
}

/// The provider profile, schema limits and policy (the global one, or with `--team` that
/// team's): from the configuration, or the bare slug with the defaults.
fn profile(args: &CheckArgs) -> Result<(ProviderProfile, SchemaLimits, Policy), String> {
    let (provider, limits, policy) = configured(args)?;
    match &args.item_profile {
        None => Ok((provider, limits, policy)),
        Some(name) => {
            let item_profile = ItemProfile::built_in(name).map_err(|e| e.to_string())?;
            Ok((provider.with_item_profile(Some(item_profile)), limits, policy))
        }
    }
}

/// The provider profile, schema limits and policy the configuration (if any) gives.
fn configured(args: &CheckArgs) -> Result<(ProviderProfile, SchemaLimits, Policy), String> {
    let Some(path) = &args.config else {
        return Ok((
            ProviderProfile::own_namespace(&args.provider),
            SchemaLimits::default(),
            Policy::default(),
        ));
    };
    let config = Config::load(path).map_err(|e| e.to_string())?;
    let provider = config.providers.get(&args.provider).ok_or_else(|| {
        let known: Vec<&str> = config.providers.keys().map(String::as_str).collect();
        format!(
            "provider `{}` is not in {} (known: {})",
            args.provider,
            path.display(),
            known.join(", ")
        )
    })?;
    let mut policy = config.gate.policy();
    if let Some(name) = &args.team {
        let teams = Teams::new(&config.teams, &policy).map_err(|e| e.to_string())?;
        policy = teams
            .by_name(name)
            .ok_or_else(|| format!("team `{name}` is not in {}", path.display()))?
            .policy
            .clone();
    }
    Ok((
        ProviderProfile::new(&args.provider, provider.namespaces().iter().cloned())
            .with_item_profile(provider.item_profile.clone()),
        config.gate.schema_limits(),
        policy,
    ))
}

fn open<'s>(input: &str, stdin: impl Read + 's) -> Result<Box<dyn BufRead + 's>, String> {
    if input == "-" {
        return Ok(Box::new(io::BufReader::new(stdin)));
    }
    let file = std::fs::File::open(Path::new(input)).map_err(|e| format!("cannot open {input}: {e}"))?;
    Ok(Box::new(io::BufReader::new(file)))
}
