//! A/B tests ([`crate::abtests`]) and named strategies.

use std::sync::Arc;

use crate::abtests::significance::{self, Significance};
use crate::abtests::{AbTest, Counts, NewTest, START_LEASE, Status};
use crate::strategy::{Strategy, Versioned};
use crate::{Engine, EngineError, Result};

/// How often, and how far apart, a start waits for another node's start of the app's test.
const START_TRIES: usize = 100;
const START_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// A test with its counts per variant (A, B) and what they say.
#[derive(Debug, Clone, PartialEq)]
pub struct AbTestResults {
    pub test: AbTest,
    pub status: Status,
    pub counts: [Counts; 2],
    pub significance: Significance,
}

impl Engine {
    /// Start an A/B test: checked alone, then the names its variants give (named strategies,
    /// queues), then that no running test is on its index.
    pub async fn add_abtest(&self, app: &str, new: NewTest) -> Result<AbTest> {
        let (name, variants, end_at) = self.abtests.check(new)?;
        for (i, variant) in variants.iter().enumerate() {
            let Some(params) = &variant.custom_search_parameters else {
                continue;
            };
            let at = format!("variants[{i}].customSearchParameters");
            if let Some(strategy) = &params.personalization_strategy
                && self.strategies.named(app, strategy).await?.is_none()
            {
                return Err(EngineError::Invalid(format!(
                    "{at}.personalizationStrategy: no strategy is named `{strategy}` (PUT \
                     /1/strategies/personalization/named/{strategy} saves one)"
                )));
            }
            if let Some(queue) = &params.queue {
                self.queue_definition(app, queue)
                    .await
                    .map_err(|e| match e {
                        EngineError::NotFound(m) | EngineError::Invalid(m) => {
                            EngineError::Invalid(format!("{at}.queue: {m}"))
                        }
                        other => other,
                    })?;
            }
        }
        let _starting = self.abtests.starting.lock().await;
        for _ in 0..START_TRIES {
            let add = self
                .abtests
                .add(app, name.clone(), variants.clone(), end_at);
            if let Some(test) = self.leases.run(app, START_LEASE, add).await? {
                return Ok(test);
            }
            tokio::time::sleep(START_RETRY).await;
        }
        Err(EngineError::Unavailable(
            "another node has been starting an A/B test of this app for a while: retry".into(),
        ))
    }

    /// The app's tests as stored now, oldest first.
    pub async fn abtests(&self, app: &str) -> Result<Arc<Vec<AbTest>>> {
        self.abtests.fresh(app).await
    }

    /// A test with its results: this node's counts saved first, then the variants' counts as
    /// stored (other nodes' arrive within [`crate::abtests::results::FLUSH_EVERY`]).
    pub async fn abtest_results(&self, app: &str, id: u32) -> Result<AbTestResults> {
        let test = self.abtests.get(app, id).await?;
        self.flush_abtests().await?;
        let counts = self.abtests.results.counts(app, id).await?;
        Ok(AbTestResults {
            status: test.status(self.clock.now_ms()),
            significance: significance::of(&counts),
            counts,
            test,
        })
    }

    /// Save this node's A/B test counts now.
    pub async fn flush_abtests(&self) -> Result<()> {
        self.abtests.results.flush().await
    }

    pub async fn stop_abtest(&self, app: &str, id: u32) -> Result<AbTest> {
        self.abtests.stop(app, id).await
    }

    pub async fn delete_abtest(&self, app: &str, id: u32) -> Result<AbTest> {
        self.abtests.delete(app, id).await
    }

    /// The app's named strategies, by name.
    pub async fn named_strategies(&self, app: &str) -> Result<Vec<(String, Arc<Versioned>)>> {
        self.strategies.all_named(app).await
    }

    pub async fn named_strategy(&self, app: &str, name: &str) -> Result<Arc<Versioned>> {
        crate::keys::check_name("strategy", name, crate::strategy::MAX_NAME_BYTES)?;
        self.strategies
            .named(app, name)
            .await?
            .ok_or_else(|| EngineError::NotFound(format!("no strategy is named `{name}`")))
    }

    /// Save a named strategy (no profile is recomputed: see [`crate::strategy`]).
    pub async fn set_named_strategy(
        &self,
        app: &str,
        name: &str,
        strategy: Strategy,
    ) -> Result<Arc<Versioned>> {
        self.strategies.set_named(app, name, strategy).await
    }

    /// Delete a named strategy, unless a running A/B test uses it.
    pub async fn delete_named_strategy(&self, app: &str, name: &str) -> Result<()> {
        let now = self.clock.now_ms();
        let tests = self.abtests.fresh(app).await?;
        let user = tests.iter().find(|t| {
            t.status(now) == Status::Active
                && t.variants.iter().any(|v| {
                    v.custom_search_parameters
                        .as_ref()
                        .and_then(|p| p.personalization_strategy.as_deref())
                        == Some(name)
                })
        });
        if let Some(test) = user {
            return Err(EngineError::Refused(format!(
                "the running A/B test {} uses strategy `{name}`: stop it first",
                test.id
            )));
        }
        if !self.strategies.delete_named(app, name).await? {
            return Err(EngineError::NotFound(format!(
                "no strategy is named `{name}`"
            )));
        }
        Ok(())
    }
}
