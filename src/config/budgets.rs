//! Budgets, `[prices."GLOB"]` and `[usage]` (docs/budgets.md): a team's or a key's `budget`, as
//! written and checked, what a model's tokens cost, and how reservations are made. A `usd`
//! budget needs a price for every model its team may use: that is checked here, at load.

use std::collections::BTreeMap;
use std::ops::Range;

use globset::Glob;
use toml::Spanned;

use super::error::Invalid;
use super::OnUnavailable;
use crate::spend::{Budget, BudgetLimit, Price, Window, MAX_BUDGET_UNITS};

/// `budget = { tokens = N, window = "..." }` or `{ usd = X, window = "..." }` as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BudgetEntry {
    tokens: Option<Spanned<i64>>,
    usd: Option<Spanned<f64>>,
    window: Spanned<String>,
}

impl BudgetEntry {
    /// Checks a budget as written at `span`: `tokens` or `usd` (one of them, positive and
    /// finite, at most [`MAX_BUDGET_UNITS`]) and a `window` that exists.
    pub(super) fn validate(self, span: Range<usize>) -> Result<Budget, Invalid> {
        let window = Window::parse(self.window.get_ref()).ok_or_else(|| {
            Invalid::new(
                self.window.span(),
                format!(
                    "budget window {:?} does not exist: write \"hour\", \"day\", \"week\" or \"month\"",
                    self.window.get_ref()
                ),
            )
        })?;
        let limit =
            match (self.tokens, self.usd) {
                (Some(_), Some(usd)) => {
                    return Err(Invalid::new(
                        usd.span(),
                        "a budget counts tokens or usd, not both: write one of them",
                    ))
                }
                (None, None) => return Err(Invalid::new(
                    span,
                    "a budget needs `tokens = N` (input plus output tokens) or `usd = X`, with its window",
                )),
                (Some(tokens), None) => BudgetLimit::Tokens(check_tokens(&tokens)?),
                (None, Some(usd)) => BudgetLimit::MicroUsd(check_usd(&usd)?),
            };
        Ok(Budget { limit, window })
    }
}

fn check_tokens(tokens: &Spanned<i64>) -> Result<u64, Invalid> {
    match u64::try_from(*tokens.get_ref()) {
        Ok(units) if (1..=MAX_BUDGET_UNITS).contains(&units) => Ok(units),
        _ => Err(Invalid::new(
            tokens.span(),
            format!(
                "budget tokens must be from 1 to {MAX_BUDGET_UNITS}, not {}",
                tokens.get_ref()
            ),
        )),
    }
}

/// `usd` in micro-dollars, rounded to the nearest.
fn check_usd(usd: &Spanned<f64>) -> Result<u64, Invalid> {
    let dollars = *usd.get_ref();
    let micros = (dollars * 1e6).round();
    if dollars.is_finite() && micros >= 1.0 && micros <= MAX_BUDGET_UNITS as f64 {
        // In range and whole: the conversion is exact.
        return Ok(micros as u64);
    }
    Err(Invalid::new(
        usd.span(),
        format!(
            "budget usd must be a number from 0.000001 to {}, not {dollars}",
            MAX_BUDGET_UNITS / 1_000_000
        ),
    ))
}

/// One `[prices."GLOB"]` table as written: US dollars per million tokens.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PriceEntry {
    input_per_million: Spanned<f64>,
    cached_input_per_million: Option<Spanned<f64>>,
    output_per_million: Spanned<f64>,
}

/// A model's price, `[prices."GLOB"]`: US dollars per million tokens, which is micro-dollars
/// per token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PriceConfig {
    /// The table's name: a glob on the answer's model, as in `[[routes]]`.
    pub(crate) model: Glob,
    /// `input_per_million`: each input token not read from the provider's cache.
    pub(crate) input_per_million: f64,
    /// `cached_input_per_million`: each cached input token; `input_per_million` when left out.
    pub(crate) cached_input_per_million: f64,
    /// `output_per_million`: each output token, reasoning included.
    pub(crate) output_per_million: f64,
}

impl PriceConfig {
    /// The price per token (micro-dollars, which is dollars per million tokens).
    pub(crate) fn price(&self) -> Price {
        Price {
            input: self.input_per_million,
            cached_input: self.cached_input_per_million,
            output: self.output_per_million,
        }
    }
}

/// Checks every `[prices."GLOB"]`, in file order (the first whose glob matches a model prices
/// it): a usable glob, and prices that are numbers of at least 0 (0 is a free model).
pub(super) fn validate_prices(
    entries: BTreeMap<Spanned<String>, PriceEntry>,
) -> Result<Vec<PriceConfig>, Invalid> {
    let mut entries: Vec<_> = entries.into_iter().collect();
    entries.sort_by_key(|(glob, _)| glob.span().start);
    entries
        .into_iter()
        .map(|(glob, entry)| {
            let model = super::validate::name_glob(glob.get_ref())
                .map_err(|e| Invalid::new(glob.span(), format!("invalid [prices] model glob: {e}")))?;
            let input_per_million = check_price(&entry.input_per_million, "input_per_million")?;
            let cached_input_per_million = match &entry.cached_input_per_million {
                Some(written) => check_price(written, "cached_input_per_million")?,
                None => input_per_million,
            };
            Ok(PriceConfig {
                model,
                input_per_million,
                cached_input_per_million,
                output_per_million: check_price(&entry.output_per_million, "output_per_million")?,
            })
        })
        .collect()
}

/// A price: a finite number of dollars, at least 0.
fn check_price(price: &Spanned<f64>, key: &str) -> Result<f64, Invalid> {
    let value = *price.get_ref();
    if value.is_finite() && value >= 0.0 {
        // -0.0 is 0.
        return Ok(value.abs());
    }
    Err(Invalid::new(
        price.span(),
        format!("[prices] {key} must be a number of dollars of at least 0 (0 for a free model), not {value}"),
    ))
}

/// Checks that every model team `team` may use has a price, when its budget (or a key's,
/// `what`) at `span` counts dollars: each glob of its `models` (`None`: every model) must be
/// covered by a price glob ([`covers`]).
pub(super) fn check_priced(
    team: &str,
    what: &str,
    span: Range<usize>,
    models: Option<&[Glob]>,
    prices: &[PriceConfig],
) -> Result<(), Invalid> {
    let priced = |model: &Glob| prices.iter().any(|price| covers(&price.model, model));
    let unpriced = match models {
        None if prices.iter().any(|price| is_catch_all(&price.model)) => return Ok(()),
        None => format!(
            "team {team:?} may use every model (it has no `models`), and no [prices] glob prices every \
             model: add [prices.\"*\"], or give the team the `models` it uses"
        ),
        Some(models) => match models.iter().find(|model| !priced(model)) {
            None => return Ok(()),
            Some(model) => format!(
                "team {team:?} may use models matching {:?}, and no [prices] glob prices all of them: \
                 add a [prices.{:?}] table (or one whose glob is that glob's start and `*`)",
                model.glob(),
                model.glob()
            ),
        },
    };
    Err(Invalid::new(
        span,
        format!("{what} counts usd, so every model the team may use needs a price; {unpriced}"),
    ))
}

/// The characters that make a glob match more than its own text.
const GLOB_META: [char; 7] = ['*', '?', '[', ']', '{', '}', '\\'];

/// Whether every model `model` matches is matched by `price` too. Globs are not compared in
/// full: a price covers a model glob when it is `*` (or only stars), when both are the same
/// text, when the model glob is plain text the price matches, or when the price is plain text
/// and one trailing `*` and the model glob starts with that text. Anything else counts as not
/// covered, and the error says what price to add.
pub(super) fn covers(price: &Glob, model: &Glob) -> bool {
    let (price_text, model_text) = (price.glob(), model.glob());
    let plain = |text: &str| !text.contains(GLOB_META);
    if is_catch_all(price) || price_text == model_text {
        return true;
    }
    if plain(model_text) {
        return price.compile_matcher().is_match(model_text);
    }
    price_text
        .strip_suffix('*')
        .is_some_and(|start| plain(start) && model_text.starts_with(start))
}

/// Whether `glob` matches every model.
fn is_catch_all(glob: &Glob) -> bool {
    !glob.glob().is_empty() && glob.glob().chars().all(|c| c == '*')
}

/// `[usage]`: how budgets reserve and whether they refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct UsageConfig {
    /// `default_output_reservation`: the output tokens reserved for a request without
    /// `max_output_tokens`; default 4096.
    pub(crate) default_output_reservation: u32,
    /// `mode`: `enforce` (a request that would pass its budget is refused) or `monitor`
    /// (counted, and the passed budget named in a header, nothing refused).
    pub(crate) mode: UsageMode,
    /// `[state] on_unavailable`: whether a request held to a budget goes on while the state
    /// backend cannot count it (`allow`), or is refused 503 `budget_unavailable` (the default).
    #[serde(skip)]
    pub(crate) on_unavailable: OnUnavailable,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            default_output_reservation: 4096,
            mode: UsageMode::Enforce,
            on_unavailable: OnUnavailable::Refuse,
        }
    }
}

/// `[usage] mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum UsageMode {
    /// A request that would pass its budget is refused (the default).
    #[default]
    Enforce,
    /// Budgets are counted and a passed one named, never refused.
    Monitor,
}
