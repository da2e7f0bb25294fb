//! Rebuilds: a set rebuilt from a full key list into a new generation, switched to with a
//! conditional write unless its estimated false-positive rate is over the set's limit.

use super::*;

impl Sets {
    /// Rebuild a set from a list of keys, one per line (`\n` or `\r\n`; empty lines skipped):
    /// build the next generation, and switch to it unless its estimated false-positive rate
    /// passes the set's `maxErrorRate` — then the set keeps its generation and the error says
    /// why. Adds made during a rebuild go to the old generation: the list must hold them.
    pub async fn rebuild<S, E>(&self, app: &str, name: &str, mut lines: S) -> Result<Rebuild>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let d = self.read_description(app, name).await?;
        let generation = new_generation();
        let mut rebuild = Rebuild {
            state: RebuildState::Running,
            generation,
            keys: 0,
            estimated_error_rate: None,
            message: None,
            started_at: self.clock.now_ms(),
            finished_at: None,
        };
        self.save_rebuild(app, name, &rebuild).await?;
        let shape = d.empty_partition()?;
        let mut filter = PartitionedFilter::from_partitions(vec![shape; d.partitions as usize])
            .map_err(|e| crate::internal("corrupt set", e))?;
        let mut distinct = 0u64;
        let mut rest: Vec<u8> = Vec::new();
        let mut take = |line: &[u8], filter: &mut PartitionedFilter, keys: &mut u64| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.is_empty() {
                *keys += 1;
                if filter.insert(line).is_some() {
                    distinct += 1;
                }
            }
        };
        let mut failure = None;
        while let Some(chunk) = lines.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    failure = Some(format!("reading the key list failed: {e}"));
                    break;
                }
            };
            rest.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(end) = rest[start..].iter().position(|b| *b == b'\n') {
                take(&rest[start..start + end], &mut filter, &mut rebuild.keys);
                start += end + 1;
            }
            rest.drain(..start);
        }
        if failure.is_none() {
            take(&rest, &mut filter, &mut rebuild.keys);
        }
        let estimated = filter.estimated_fp_rate();
        rebuild.estimated_error_rate = Some(estimated);
        let max = d.config.max_error_rate();
        let refused = (estimated > max).then(|| {
            format!(
                "rebuild refused: the new generation's estimated false-positive rate {:.4}% is above the set's maxErrorRate {:.4}% ({} keys for a capacity of {}); generation {} is kept",
                estimated * 100.0,
                max * 100.0,
                rebuild.keys,
                d.config.capacity,
                d.generation
            )
        });
        let outcome = match (failure, refused) {
            (Some(message), _) => Err((RebuildState::Failed, message)),
            (None, Some(message)) => Err((RebuildState::Refused, message)),
            (None, None) => self
                .write_generation(app, name, generation, &filter)
                .await
                .map_err(|e| (RebuildState::Failed, e.to_string())),
        };
        let outcome = match outcome {
            Ok(()) => self
                .switch(app, name, d.generation, generation, distinct, &mut rebuild)
                .await
                .map_err(|e| (RebuildState::Failed, e.to_string()))
                .and_then(|switched| {
                    switched.then_some(()).ok_or((
                        RebuildState::Failed,
                        "another rebuild switched the set first; this one is dropped".into(),
                    ))
                }),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => {
                // Nodes whose copy of the description is stale find the old partitions gone,
                // read the description again and follow (see `lookup`).
                self.store
                    .delete_prefix(PARTITIONS_TABLE, keys::generation(app, name, d.generation))
                    .await?;
                Ok(rebuild)
            }
            Err((state, message)) => {
                rebuild.state = state;
                rebuild.message = Some(message.clone());
                rebuild.finished_at = Some(self.clock.now_ms());
                self.save_rebuild(app, name, &rebuild).await?;
                // The generation built, whole or in part, is not reachable; clear it.
                self.store
                    .delete_prefix(PARTITIONS_TABLE, keys::generation(app, name, generation))
                    .await?;
                Err(match state {
                    RebuildState::Refused => EngineError::Refused(message),
                    _ => EngineError::Invalid(message),
                })
            }
        }
    }

    /// Switch a set from generation `old` to `new` with its key count and the finished
    /// rebuild, in one conditional write: only if the set is still at `old` (two rebuilds at
    /// once: the first to finish wins). Returns whether it switched.
    async fn switch(
        &self,
        app: &str,
        name: &str,
        old: u64,
        new: u64,
        keys: u64,
        rebuild: &mut Rebuild,
    ) -> Result<bool> {
        rebuild.state = RebuildState::Done;
        rebuild.finished_at = Some(self.clock.now_ms());
        let json =
            serde_json::to_vec(&*rebuild).map_err(|e| crate::internal("serialization", e))?;
        let at_old =
            RowFilter::column(FAMILY, GENERATION).and(RowFilter::ValueRegex(old.to_string()));
        let switched = self
            .store
            .check_and_mutate_row(
                SETS_TABLE,
                keys::set(app, name),
                Some(at_old),
                vec![
                    Mutation::set_now(FAMILY, GENERATION, new.to_string()),
                    Mutation::set_now(FAMILY, KEYS, (keys as i64).to_be_bytes().to_vec()),
                    Mutation::set_now(FAMILY, REBUILD, json),
                ],
                vec![],
            )
            .await?;
        if switched {
            self.read_description(app, name).await?;
        }
        Ok(switched)
    }

    /// Write a generation's non-empty partitions, in batches.
    async fn write_generation(
        &self,
        app: &str,
        name: &str,
        generation: u64,
        filter: &PartitionedFilter,
    ) -> Result<()> {
        let rows: Vec<RowMutation> = filter
            .partitions()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.fill_ratio() > 0.0)
            .map(|(i, p)| {
                RowMutation::new(
                    keys::partition(app, name, generation, i as u32),
                    vec![
                        Mutation::set_now(PART_FAMILY, Bytes::from_static(FILTER), p.to_bytes()),
                        Mutation::set_now(PART_FAMILY, Bytes::from_static(VERSION), "1"),
                    ],
                )
            })
            .collect();
        for batch in rows.chunks(WRITE_BATCH) {
            for status in self
                .store
                .mutate_rows(PARTITIONS_TABLE, batch.to_vec())
                .await?
            {
                status?;
            }
        }
        Ok(())
    }
}
