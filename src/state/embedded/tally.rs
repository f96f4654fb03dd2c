//! The embedded store's usage tallies (docs/usage.md#get-usage): counted in memory beside the
//! spend counters ([`LocalCounters`](crate::state::local_spend::LocalCounters), one counter per
//! field, all of an answer's fields under one lock), and written to the keyspace `spend` by the
//! writer thread with them, so they survive a restart as the spend counters do.

use super::EmbeddedStore;
use crate::state::tally::{TallyKey, WindowUsage};
use crate::state::{now_unix, StoreError};

impl EmbeddedStore {
    /// [`StateStore::add_usage`](crate::state::StateStore::add_usage): counted at once,
    /// written by the writer thread.
    pub(in crate::state) fn add_usage(
        &self,
        key: &TallyKey,
        amounts: &[(&str, u64)],
        expires: u64,
    ) -> Result<(), StoreError> {
        self.counting()?;
        self.inner.counters.add(key, amounts, expires, now_unix());
        self.tell_writer();
        Ok(())
    }

    /// What the tally holds.
    pub(in crate::state) fn window_usage(&self, key: &TallyKey) -> Result<WindowUsage, StoreError> {
        self.counting()?;
        Ok(self.inner.counters.usage(key, now_unix()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::spend::Window;
    use crate::state::spend::SpendOwner;

    fn tally(team: &str) -> TallyKey {
        TallyKey::new(&SpendOwner::team(team), Window::Day, 0)
    }

    fn usage(input: u64) -> WindowUsage {
        WindowUsage {
            input,
            output: 2,
            cost_micro_usd: 30,
            answers: 1,
            ..WindowUsage::default()
        }
    }

    /// Tallies survive a restart, as the spend counters do: every store of the directory
    /// closed (the writer writes what changed and syncs), then the directory opened again.
    #[tokio::test]
    async fn tallies_survive_a_restart_and_expired_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let expires = now_unix() + 3600;
        {
            let store = EmbeddedStore::open(dir.path()).unwrap();
            let amounts = usage(10).amounts();
            store.add_usage(&tally("a"), &amounts, expires).unwrap();
            store.add_usage(&tally("a"), &amounts, expires).unwrap();
            store
                .add_usage(&tally("short"), &amounts, now_unix() + 1)
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let expected = WindowUsage {
            input: 20,
            output: 4,
            cost_micro_usd: 60,
            answers: 2,
            ..WindowUsage::default()
        };
        assert_eq!(store.window_usage(&tally("a")).unwrap(), expected);
        assert_eq!(
            store.window_usage(&tally("short")).unwrap(),
            WindowUsage::default()
        );
        store
            .add_usage(&tally("a"), &usage(1).amounts(), expires)
            .unwrap();
        assert_eq!(store.window_usage(&tally("a")).unwrap().input, 21);
    }
}
