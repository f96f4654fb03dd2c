//! Budgets (`[teams.NAME] budget`, a key's `budget`), `[prices."GLOB"]` and `[usage]`.

use super::budgets::covers;
use super::*;
use crate::keys;
use crate::spend::Window;

/// A provider with its own credential, so teams may be configured.
const PROVIDER: &str = r#"[providers.openai]
base_url = "https://api.openai.com/v1"
auth = { bearer_env = "OPENAI_API_KEY" }
"#;

/// Lines in [`PROVIDER`].
const PROVIDER_LINES: usize = 3;

/// SHA-256("test").
const DIGEST: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn load(text: &str) -> Config {
    Config::from_toml(&format!("{PROVIDER}{text}")).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Asserts that `text` after [`PROVIDER`] fails with `needle` at `line` (counted in `text`) and
/// `column`, as a parse error or a semantic one.
fn assert_error_at(text: &str, line: usize, column: usize, needle: &str) {
    let whole = format!("{PROVIDER}{text}");
    let line = line + PROVIDER_LINES;
    match Config::from_toml(&whole) {
        Err(ConfigError::Parse { .. }) => super::tests::assert_parse_error_at(&whole, line, column, needle),
        _ => super::tests::assert_invalid_at(&whole, line, column, needle),
    }
}

fn team(budget: &str) -> String {
    format!("[teams.t]\nkeys = [\"{DIGEST}\"]\nmodels = [\"gpt-5*\"]\nbudget = {budget}\n")
}

#[test]
fn without_budgets_prices_or_usage_nothing_is_limited() {
    let config = load(&format!("[teams.t]\nkeys = [\"{DIGEST}\"]\n"));
    assert_eq!(config.teams["t"].budget, None);
    assert_eq!(config.teams["t"].keys[0].budget, None);
    assert!(config.prices.is_empty());
    assert_eq!(
        config.usage,
        UsageConfig {
            on_unavailable: super::OnUnavailable::Refuse,
            default_output_reservation: 4096,
            mode: UsageMode::Enforce
        }
    );
}

#[test]
fn a_team_budget_counts_tokens_or_dollars_in_a_window() {
    let config = load(&team("{ tokens = 2000000, window = \"day\" }"));
    assert_eq!(
        config.teams["t"].budget,
        Some(Budget {
            limit: BudgetLimit::Tokens(2_000_000),
            window: Window::Day
        })
    );
    let text = format!(
        "{}\n[prices.\"gpt-5*\"]\ninput_per_million = 1.25\noutput_per_million = 10\n",
        team("{ usd = 50.0, window = \"month\" }")
    );
    let budget = load(&text).teams["t"].budget.unwrap();
    assert_eq!(budget.limit, BudgetLimit::MicroUsd(50_000_000));
    assert_eq!(
        (budget.limit.unit(), budget.limit.units()),
        (BudgetUnit::MicroUsd, 50_000_000)
    );
    assert_eq!(budget.limit.unit().as_str(), "usd");
    assert_eq!(BudgetUnit::Tokens.as_str(), "tokens");
    assert_eq!(budget.window, Window::Month);
    // Whole dollars, a cent, a millionth; the table form.
    for (usd, micros) in [("7", 7_000_000), ("0.01", 10_000), ("0.000001", 1)] {
        let text = format!(
            "[teams.t]\nkeys = [\"{DIGEST}\"]\n[teams.t.budget]\nusd = {usd}\nwindow = \"week\"\n\
             [prices.\"*\"]\ninput_per_million = 0\noutput_per_million = 0\n"
        );
        assert_eq!(
            load(&text).teams["t"].budget.unwrap().limit,
            BudgetLimit::MicroUsd(micros),
            "{usd}"
        );
    }
    for window in Window::ALL {
        let text = team(&format!("{{ tokens = 1, window = \"{window}\" }}"));
        assert_eq!(load(&text).teams["t"].budget.unwrap().window, window);
    }
}

#[test]
fn a_key_may_carry_its_own_budget() {
    let text = format!(
        "[teams.t]\nkeys = [\"{DIGEST}\", {{ id = \"ci\", digest = \"{}\", budget = {{ tokens = 1000, window = \"hour\" }} }}]\n",
        keys::format_digest(&keys::digest("rg-other"))
    );
    let config = load(&text);
    let team = &config.teams["t"];
    assert_eq!(team.budget, None);
    assert_eq!(team.keys[0].budget, None);
    assert_eq!(
        team.keys[1].budget,
        Some(Budget {
            limit: BudgetLimit::Tokens(1000),
            window: Window::Hour
        })
    );
}

#[test]
fn a_window_that_does_not_exist_is_named_at_its_line() {
    assert_error_at(
        &team("{ tokens = 5, window = \"days\" }"),
        4,
        33,
        "budget window \"days\" does not exist",
    );
    let text = format!(
        "[teams.t]\nkeys = [\n  {{ digest = \"{DIGEST}\", budget = {{ tokens = 5, window = \"year\" }} }},\n]\n"
    );
    let column = text.lines().nth(2).unwrap().find("\"year\"").unwrap() + 1;
    assert_error_at(&text, 3, column, "budget window \"year\" does not exist");
}

#[test]
fn a_budget_needs_one_positive_finite_amount() {
    for (budget, column, needle) in [
        ("{ tokens = 0, window = \"day\" }", 21, "from 1 to"),
        ("{ tokens = -5, window = \"day\" }", 21, "not -5"),
        (
            "{ usd = 0.0, window = \"day\" }",
            18,
            "budget usd must be a number",
        ),
        ("{ usd = -1.5, window = \"day\" }", 18, "not -1.5"),
        ("{ usd = inf, window = \"day\" }", 18, "not inf"),
        ("{ usd = nan, window = \"day\" }", 18, "not NaN"),
        ("{ usd = 0.0000001, window = \"day\" }", 18, "from 0.000001"),
        ("{ usd = 1e12, window = \"day\" }", 18, "from 0.000001"),
        (
            "{ tokens = 9007199254740993, window = \"day\" }",
            21,
            "from 1 to 9007199254740992",
        ),
        (
            "{ tokens = 1, usd = 1.0, window = \"day\" }",
            30,
            "tokens or usd, not both",
        ),
        ("{ window = \"day\" }", 10, "needs `tokens = N`"),
    ] {
        let text = format!(
            "{}\n[prices.\"*\"]\ninput_per_million = 1\noutput_per_million = 1\n",
            team(budget)
        );
        assert_error_at(&text, 4, column, needle);
    }
    assert_error_at(&team("{ tokens = 5 }"), 4, 10, "missing field `window`");
    assert_error_at(
        &team("{ tokens = 5, window = \"day\", cap = 1 }"),
        4,
        40,
        "unknown field `cap`",
    );
    assert_error_at(&team("{ tokens = 1.5, window = \"day\" }"), 4, 21, "invalid type");
}

#[test]
fn prices_apply_in_file_order_and_cached_input_defaults_to_input() {
    let text = "[prices.\"gpt-5-mini\"]\ninput_per_million = 0.25\noutput_per_million = 2\n\
                [prices.\"gpt-5*\"]\ninput_per_million = 1.25\ncached_input_per_million = 0.125\noutput_per_million = 10.0\n\
                [prices.\"local/*\"]\ninput_per_million = 0\noutput_per_million = 0\n";
    let config = load(text);
    let globs: Vec<&str> = config.prices.iter().map(|price| price.model.glob()).collect();
    assert_eq!(globs, ["gpt-5-mini", "gpt-5*", "local/*"]);
    assert_eq!(config.prices[0].cached_input_per_million, 0.25);
    assert_eq!(
        (
            config.prices[1].input_per_million,
            config.prices[1].cached_input_per_million,
            config.prices[1].output_per_million
        ),
        (1.25, 0.125, 10.0)
    );
    assert_eq!(config.prices[2].output_per_million, 0.0);
}

#[test]
fn a_negative_or_unusable_price_is_an_error_at_its_line() {
    for (price, needle) in [
        ("-1.0", "not -1"),
        ("-0.001", "not -0.001"),
        ("inf", "not inf"),
        ("nan", "not NaN"),
    ] {
        let text = format!("[prices.\"gpt-5*\"]\ninput_per_million = 1\noutput_per_million = {price}\n");
        assert_error_at(&text, 3, 22, needle);
        assert_error_at(&text, 3, 22, "at least 0 (0 for a free model)");
    }
    let text =
        "[prices.\"gpt-5*\"]\ninput_per_million = 1\ncached_input_per_million = -2\noutput_per_million = 1\n";
    assert_error_at(text, 3, 28, "[prices] cached_input_per_million");
    assert_error_at(
        "[prices.\"gpt-5*\"]\ninput_per_million = 1\n",
        1,
        1,
        "missing field `output_per_million`",
    );
    assert_error_at(
        "[prices.\"a[\"]\ninput_per_million = 1\noutput_per_million = 1\n",
        1,
        9,
        "invalid [prices] model glob",
    );
    assert_error_at(
        "[prices.\"m\"]\ninput_per_million = 1\noutput_per_million = 1\nper_request = 1\n",
        4,
        1,
        "unknown field `per_request`",
    );
    // -0 is a free model too.
    let config = load("[prices.\"m\"]\ninput_per_million = -0.0\noutput_per_million = 0\n");
    assert!(config.prices[0].input_per_million.is_sign_positive());
}

#[test]
fn a_usd_budget_needs_every_model_its_team_may_use_priced() {
    let priced = |models: &str, prices: &[&str], budget_line: &str| {
        let mut text = format!("[teams.t]\nkeys = [\"{DIGEST}\"]\n{models}\n{budget_line}\n");
        for glob in prices {
            text.push_str(&format!(
                "[prices.{glob:?}]\ninput_per_million = 1\noutput_per_million = 2\n"
            ));
        }
        Config::from_toml(&format!("{PROVIDER}{text}")).map(|_| ())
    };
    let usd = "budget = { usd = 5.0, window = \"day\" }";
    for (models, prices) in [
        ("models = [\"gpt-5*\"]", &["gpt-5*"][..]),
        ("models = [\"gpt-5*\"]", &["*"]),
        ("models = [\"gpt-5-mini\", \"gpt-5.1*\"]", &["gpt-5*"]),
        ("models = [\"gpt-5-mini\"]", &["gpt-5-m?ni"]),
        ("models = [\"gpt-5.?\", \"o3\"]", &["o*", "gpt-5.*"]),
        ("", &["gpt-5*", "*"]),
    ] {
        assert!(priced(models, prices, usd).is_ok(), "{models} {prices:?}");
        // A tokens budget needs no price.
        let tokens = "budget = { tokens = 5, window = \"day\" }";
        assert!(priced(models, &[], tokens).is_ok(), "{models}");
    }
    for (models, prices, needle) in [
        ("models = [\"gpt-5*\"]", &[][..], "models matching \"gpt-5*\""),
        (
            "models = [\"gpt-5*\"]",
            &["gpt-5-mini"],
            "models matching \"gpt-5*\"",
        ),
        (
            "models = [\"gpt-5*\", \"o3\"]",
            &["gpt-5*"],
            "models matching \"o3\"",
        ),
        (
            "models = [\"gpt-*\"]",
            &["gpt-5*"],
            "add a [prices.\"gpt-*\"] table",
        ),
        (
            "",
            &["gpt-5*"],
            "no [prices] glob prices every model: add [prices.\"*\"]",
        ),
    ] {
        let error = priced(models, prices, usd).unwrap_err().to_string();
        assert!(error.contains(needle), "{models} {prices:?}: {error}");
        assert!(error.contains("the team's budget counts usd"), "{error}");
        // At the budget's line.
        assert!(
            error.contains(&format!("line {}, column 10", PROVIDER_LINES + 4)),
            "{error}"
        );
    }
    // A key's usd budget is held to its team's models too.
    let text = format!(
        "[teams.t]\nkeys = [{{ digest = \"{DIGEST}\", budget = {{ usd = 1.0, window = \"day\" }} }}]\nmodels = [\"o3\"]\n"
    );
    let column = text.lines().nth(1).unwrap().find("budget").unwrap() + 10;
    assert_error_at(&text, 2, column, "a key's budget counts usd");
    let priced_key = format!("{text}[prices.\"o3\"]\ninput_per_million = 2\noutput_per_million = 8\n");
    assert!(load(&priced_key).teams["t"].keys[0].budget.is_some());
}

#[test]
fn a_price_covers_a_model_glob_only_when_it_surely_matches_all_it_does() {
    let glob = |text: &str| validate::name_glob(text).unwrap();
    for (price, model) in [
        ("*", "anything*"),
        ("**", "x"),
        ("gpt-5*", "gpt-5*"),
        ("gpt-5*", "gpt-5-mini"),
        ("gpt-5*", "gpt-5.1-*"),
        ("gpt-5*", "gpt-5?"),
        ("gpt-?", "gpt-5"),
        ("gpt-{5,4o}", "gpt-4o"),
        ("a[bc]d*", "a[bc]d*"),
    ] {
        assert!(covers(&glob(price), &glob(model)), "{price} should cover {model}");
    }
    for (price, model) in [
        ("gpt-5*", "gpt-*"),
        ("gpt-?", "gpt-*"),
        ("gpt-5", "gpt-5*"),
        ("*-mini", "gpt-*-mini"),
        ("gpt-5?", "gpt-5*"),
        ("gpt-[5]*", "gpt-5*"),
        ("gpt-5*", "gpt-4o"),
    ] {
        assert!(
            !covers(&glob(price), &glob(model)),
            "{price} should not cover {model}"
        );
    }
}

#[test]
fn usage_sets_the_default_output_reservation_and_the_mode() {
    let config = load("[usage]\ndefault_output_reservation = 0\nmode = \"monitor\"\n");
    assert_eq!(
        config.usage,
        UsageConfig {
            on_unavailable: super::OnUnavailable::Refuse,
            default_output_reservation: 0,
            mode: UsageMode::Monitor
        }
    );
    assert_eq!(load("[usage]\n").usage, UsageConfig::default());
    assert_error_at("[usage]\nmode = \"warn\"\n", 2, 8, "unknown variant `warn`");
    assert_error_at(
        "[usage]\ndefault_output_reservation = -1\n",
        2,
        30,
        "invalid value",
    );
    assert_error_at("[usage]\nreservation = 1\n", 2, 1, "unknown field `reservation`");
}

/// Prices as the proxy compiles them from `[prices]`.
fn prices(toml: &str) -> crate::spend::Prices {
    let config = crate::config::Config::from_toml(&format!(
        "[providers.openai]\nbase_url = \"https://api.openai.com/v1\"\n{toml}"
    ))
    .unwrap();
    crate::spend::Prices::new(config.prices.iter().map(|price| (&price.model, price.price())))
}

#[test]
fn the_first_matching_table_in_file_order_prices_a_model() {
    let prices = prices(
        "[prices.\"gpt-5-mini*\"]\ninput_per_million = 0.25\noutput_per_million = 2.0\n\
         [prices.\"gpt-5*\"]\ninput_per_million = 1.25\ncached_input_per_million = 0.125\noutput_per_million = 10.0\n",
    );
    assert_eq!(prices.of("gpt-5-mini-2025").unwrap().input, 0.25);
    // Without `cached_input_per_million`, cached tokens cost as input.
    assert_eq!(prices.of("gpt-5-mini").unwrap().cached_input, 0.25);
    assert_eq!(prices.of("gpt-5.1").unwrap().output, 10.0);
    assert!(prices.of("o3").is_none());
    let dearest = prices.dearest().unwrap();
    assert_eq!(
        (dearest.input, dearest.cached_input, dearest.output),
        (1.25, 0.25, 10.0)
    );
    assert!(crate::spend::Prices::default().dearest().is_none());
    assert!(!prices.is_empty());
}
