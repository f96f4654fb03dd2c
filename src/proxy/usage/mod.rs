//! Usage in the proxy (docs/usage.md): every answer to a `POST` of `/responses` or
//! `/responses/compact` (over HTTP, or a turn on a WebSocket) has its usage delivered exactly
//! once, reported or missing, to the sink its request holds.
//!
//! The interface, for whatever consumes usage (the metrics and log lines here; a budget that
//! settles a reservation later):
//!
//! - [`UsageSink`]: receives each answer's [`Answered`]: whose it is ([`Answerer`]: team, key
//!   id, provider, the request's id and model), the model that answered (the answer's, else
//!   the request's) and its [`AnswerUsage`].
//! - [`RequestUsage`]: what a request holds once it is judged: its [`Answerer`] and its sink.
//!   [`RequestUsage::answer`] opens one [`PendingUsage`] per answer asked of the provider.
//! - [`PendingUsage`]: one answer still to be counted. [`PendingUsage::deliver`] hands the
//!   sink what the answer's reader read; dropped undelivered (the provider could not be
//!   reached, answered an error status, the client went away before the reader ended, a
//!   WebSocket closed mid-answer), it delivers [`AnswerUsage::Missing`]. No answer goes
//!   uncounted.
//!
//! Who reads the answer: the ledger's tap when the ledger records it
//! (`super::ledger::recording`, the WebSocket relay's turns, which always read with a tap),
//! else a [`UsageBody`] with the core's reader of usage alone. Both pass every frame on as it
//! arrives: nothing is held back for usage.

mod body;
mod counted;
mod tallied;

use std::sync::Arc;

pub(crate) use body::UsageBody;
pub(crate) use counted::Counted;
pub(crate) use tallied::{team_tally, Tallied, ANONYMOUS};

use crate::spend::{Price, Prices};
use crate::usage::{AnswerUsage, ReadUsage};

/// Whose an answer is: what its usage is counted under.
#[derive(Debug, Clone)]
pub(crate) struct Answerer {
    /// The request's id.
    pub(crate) request_id: String,
    /// The client key's team (`None`: anonymous).
    pub(crate) team: Option<String>,
    /// The client key's id (`None`: anonymous, or known by its certificate alone).
    pub(crate) key_id: Option<String>,
    /// The client certificate's matched name, when a certificate named the team.
    pub(crate) client_cert: Option<String>,
    /// The provider the request was forwarded to.
    pub(crate) provider: String,
    /// The request's `model`, when it was read.
    pub(crate) model: Option<String>,
}

/// One answer's usage, as delivered to a [`UsageSink`].
#[derive(Debug)]
pub(crate) struct Answered<'a> {
    /// Whose it is.
    pub(crate) answerer: &'a Answerer,
    /// The model the answer named, else the request's.
    pub(crate) model: Option<&'a str>,
    /// What it reported.
    pub(crate) usage: AnswerUsage,
}

impl Answered<'_> {
    /// The answer's price: its model's, else the request's (a dated model name the
    /// `[prices]` globs do not match is priced as the model asked for).
    pub(crate) fn price<'p>(&self, prices: &'p Prices) -> Option<&'p Price> {
        let priced = |model: Option<&str>| model.and_then(|model| prices.of(model));
        priced(self.model).or_else(|| priced(self.answerer.model.as_deref()))
    }
}

/// Receives the usage of each answer of a request, once per answer.
pub(crate) trait UsageSink: Send + Sync {
    /// One answer ended with `answered`.
    fn answered(&self, answered: &Answered<'_>);
}

/// Several sinks, each given every answer, in order.
pub(crate) struct Sinks(pub(crate) Vec<Box<dyn UsageSink>>);

impl UsageSink for Sinks {
    fn answered(&self, answered: &Answered<'_>) {
        for sink in &self.0 {
            sink.answered(answered);
        }
    }
}

/// What a request that asks the provider for answers holds: whose they are, and the sink
/// their usage goes to.
#[derive(Clone)]
pub(crate) struct RequestUsage {
    answerer: Arc<Answerer>,
    sink: Arc<dyn UsageSink>,
}

impl std::fmt::Debug for RequestUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestUsage")
            .field("answerer", &self.answerer)
            .finish_non_exhaustive()
    }
}

impl RequestUsage {
    /// The usage of `answerer`'s answers, delivered to `sink`.
    pub(crate) fn new(answerer: Answerer, sink: Arc<dyn UsageSink>) -> RequestUsage {
        RequestUsage {
            answerer: Arc::new(answerer),
            sink,
        }
    }

    /// Opens the count of one answer.
    pub(crate) fn answer(&self) -> PendingUsage {
        PendingUsage {
            usage: Some(self.clone()),
        }
    }
}

/// One answer whose usage is still to be delivered: [`PendingUsage::deliver`], or missing
/// when dropped.
#[derive(Debug)]
pub(crate) struct PendingUsage {
    /// `None` once delivered.
    usage: Option<RequestUsage>,
}

impl PendingUsage {
    /// Delivers what the answer's reader read.
    pub(crate) fn deliver(mut self, read: ReadUsage) {
        self.send(read);
    }

    fn send(&mut self, read: ReadUsage) {
        let Some(usage) = self.usage.take() else {
            return;
        };
        let answerer = &*usage.answerer;
        let model = read.model.as_deref().or(answerer.model.as_deref());
        usage.sink.answered(&Answered {
            answerer,
            model,
            usage: read.usage,
        });
    }
}

impl Drop for PendingUsage {
    /// An answer that ended before its reader could deliver it has its usage missing.
    fn drop(&mut self) {
        self.send(ReadUsage::missing());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::usage::Usage;

    #[derive(Default)]
    struct Seen(Mutex<Vec<(Option<String>, AnswerUsage)>>);

    impl UsageSink for Seen {
        fn answered(&self, answered: &Answered<'_>) {
            let model = answered.model.map(str::to_owned);
            self.0.lock().unwrap().push((model, answered.usage));
        }
    }

    #[test]
    fn each_answer_is_delivered_once_and_a_dropped_one_is_missing() {
        let seen = Arc::new(Seen::default());
        let answerer = Answerer {
            request_id: "req_1".into(),
            team: None,
            key_id: None,
            client_cert: None,
            provider: "openai".into(),
            model: Some("gpt-5".into()),
        };
        let usage = RequestUsage::new(answerer, seen.clone());
        let reported = AnswerUsage::Reported(Usage {
            input: 3,
            output: 2,
            cached_input: 1,
            reasoning_output: 0,
        });
        usage.answer().deliver(ReadUsage {
            usage: reported,
            model: Some("gpt-5-2025".into()),
        });
        drop(usage.answer());
        usage.answer().deliver(ReadUsage::missing());
        let seen = seen.0.lock().unwrap();
        assert_eq!(
            *seen,
            [
                (Some("gpt-5-2025".to_owned()), reported),
                (Some("gpt-5".to_owned()), AnswerUsage::Missing),
                (Some("gpt-5".to_owned()), AnswerUsage::Missing),
            ]
        );
    }

    #[test]
    fn an_answer_is_priced_by_its_model_else_by_the_requests() {
        let (exact, dated) = (
            globset::Glob::new("gpt-5").unwrap(),
            globset::Glob::new("o3-*").unwrap(),
        );
        let price = |input| crate::spend::Price {
            input,
            cached_input: input,
            output: input,
        };
        let prices = Prices::new([(&exact, price(1.0)), (&dated, price(2.0))]);
        let answerer = |model: &str| Answerer {
            request_id: "req".into(),
            team: None,
            key_id: None,
            client_cert: None,
            provider: "openai".into(),
            model: Some(model.into()),
        };
        let priced = |answer: Option<&str>, request: &str| {
            let answerer = answerer(request);
            let answered = Answered {
                answerer: &answerer,
                model: answer,
                usage: AnswerUsage::Missing,
            };
            answered.price(&prices).map(|price| price.input)
        };
        // A dated name the glob does not match: the model asked for prices it.
        assert_eq!(priced(Some("gpt-5-2025-08-07"), "gpt-5"), Some(1.0));
        // The answer's own model first.
        assert_eq!(priced(Some("o3-2025"), "gpt-5"), Some(2.0));
        assert_eq!(priced(None, "gpt-5"), Some(1.0));
        assert_eq!(priced(Some("claude"), "llama"), None);
    }
}
