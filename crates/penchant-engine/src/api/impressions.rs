//! Impressions: what tracked answers served, logged and read back
//! ([`crate::recommend::impressions`] holds their rows).

use crate::recommend::impressions::{Impression, check, log, write};
use crate::{Engine, EngineError, Result, keys};
use penchant_model::tables::IMPRESSIONS_TABLE;

impl Engine {
    /// Log what a tracked answer served to a user, in order (the `objectID`s of its hits); a
    /// failure is logged, not the answer's.
    pub(crate) async fn log_impression(
        &self,
        app: &str,
        index: &str,
        query_id: &str,
        user: &str,
        served: impl Iterator<Item = &serde_json::Value>,
    ) {
        let object_ids: Vec<String> = served
            .filter_map(|id| id.as_str().map(str::to_owned))
            .collect();
        if object_ids.is_empty() || !keys::user_token_ok(user) {
            return;
        }
        let impression = Impression {
            index: index.to_owned(),
            query_id: query_id.to_owned(),
            user: user.to_owned(),
            at: self.now_ms(),
            object_ids,
        };
        if let Err(e) = log(&*self.store, app, &impression).await {
            tracing::warn!(%app, error = %e, "an impression was not logged");
        }
    }

    /// Log impressions served elsewhere (an import of a shop's own logs, a benchmark), durably,
    /// a thousand rows a write; refused as a whole when one is malformed.
    pub async fn log_impressions(&self, app: &str, impressions: &[Impression]) -> Result<()> {
        for (n, impression) in impressions.iter().enumerate() {
            crate::catalog::check_index_name(&impression.index)
                .and_then(|()| check(impression))
                .map_err(|e| match e {
                    EngineError::Invalid(m) => {
                        EngineError::Invalid(format!("impressions[{n}]: {m}"))
                    }
                    other => other,
                })?;
        }
        for chunk in impressions.chunks(1000) {
            let rows = chunk
                .iter()
                .map(|i| write(app, i).map(|w| w.row))
                .collect::<Result<Vec<_>>>()?;
            self.store.mutate_all(IMPRESSIONS_TABLE, rows).await?;
        }
        Ok(())
    }
}
