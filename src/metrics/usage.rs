//! The usage families (docs/usage.md#metrics): `replaygate_usage_tokens_total{team,provider,
//! model,kind}` and `replaygate_usage_answers_total{team,provider,model,usage}`.
//!
//! Team and provider are configured names (`-` for none), as in every family. The model comes
//! from the answer (or the request), so its label values are bounded here: the first
//! [`MAX_MODELS`] model names of the process, each at most [`MAX_MODEL_BYTES`] bytes of
//! letters, digits and `-._:/@+`, are their own values; any other name is [`OTHER_MODEL`], and
//! an answer with no model `-`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use foldhash::fast::RandomState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::labels::NONE;
use crate::usage::AnswerUsage;

/// The most model names that become label values in one process.
pub(crate) const MAX_MODELS: usize = 200;

/// The longest model name that becomes a label value.
pub(crate) const MAX_MODEL_BYTES: usize = 128;

/// The label value of every other model.
pub(crate) const OTHER_MODEL: &str = "(other)";

/// `replaygate_usage_tokens_total{team,provider,model,kind}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TokenLabels {
    pub(crate) team: Arc<str>,
    pub(crate) provider: Arc<str>,
    pub(crate) model: Arc<str>,
    pub(crate) kind: &'static str,
}

/// `replaygate_usage_answers_total{team,provider,model,usage}`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct AnswerLabels {
    pub(crate) team: Arc<str>,
    pub(crate) provider: Arc<str>,
    pub(crate) model: Arc<str>,
    pub(crate) usage: &'static str,
}

/// The usage families and the model names seen.
#[derive(Default)]
pub(crate) struct UsageFamilies {
    pub(crate) tokens: Family<TokenLabels, Counter>,
    pub(crate) answers: Family<AnswerLabels, Counter>,
    models: Mutex<HashSet<Arc<str>, RandomState>>,
}

impl std::fmt::Debug for UsageFamilies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UsageFamilies").finish_non_exhaustive()
    }
}

impl UsageFamilies {
    /// The label value of `model` (see the module documentation).
    pub(crate) fn model_label(&self, model: Option<&str>) -> Arc<str> {
        let Some(model) = model else {
            return Arc::from(NONE);
        };
        let plain = !model.is_empty()
            && model.len() <= MAX_MODEL_BYTES
            && model
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._:/@+".contains(&b));
        if !plain {
            return Arc::from(OTHER_MODEL);
        }
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = models.get(model) {
            return known.clone();
        }
        if models.len() >= MAX_MODELS {
            return Arc::from(OTHER_MODEL);
        }
        let label: Arc<str> = Arc::from(model);
        models.insert(label.clone());
        label
    }

    /// Counts one answer's `usage` for `team`, `provider` and `model` (label values); a
    /// reported one is `unpriced` when prices are configured and none prices its model.
    pub(crate) fn count(
        &self,
        team: Arc<str>,
        provider: Arc<str>,
        model: Arc<str>,
        usage: AnswerUsage,
        unpriced: bool,
    ) {
        let word = match usage {
            AnswerUsage::Reported(_) if unpriced => "unpriced",
            AnswerUsage::Reported(_) => "reported",
            AnswerUsage::Missing => "missing",
        };
        let answers = AnswerLabels {
            team: team.clone(),
            provider: provider.clone(),
            model: model.clone(),
            usage: word,
        };
        self.answers.get_or_create(&answers).inc();
        let AnswerUsage::Reported(usage) = usage else {
            return;
        };
        for (kind, count) in [
            ("input", usage.input),
            ("output", usage.output),
            ("cached_input", usage.cached_input),
            ("reasoning_output", usage.reasoning_output),
        ] {
            let labels = TokenLabels {
                team: team.clone(),
                provider: provider.clone(),
                model: model.clone(),
                kind,
            };
            self.tokens.get_or_create(&labels).inc_by(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_labels_are_bounded() {
        let families = UsageFamilies::default();
        assert_eq!(&*families.model_label(None), "-");
        assert_eq!(&*families.model_label(Some("gpt-5.1-codex")), "gpt-5.1-codex");
        for odd in ["", "has space", "quote\"", &"m".repeat(MAX_MODEL_BYTES + 1)] {
            assert_eq!(&*families.model_label(Some(odd)), OTHER_MODEL, "{odd}");
        }
        for n in 0..MAX_MODELS * 2 {
            families.model_label(Some(&format!("model-{n}")));
        }
        assert_eq!(&*families.model_label(Some("gpt-5.1-codex")), "gpt-5.1-codex");
        assert_eq!(&*families.model_label(Some("one-too-many")), OTHER_MODEL);
    }
}
