//! Partitions: one cell each, read through a per-node cache, and updated under optimistic
//! concurrency (read the cell and its version, set the bits, write if the version is unchanged).
//! Lookups and adds group their keys by partition.

use super::*;
use crate::writes::write_if_version;

/// A cached partition: when it was read, its version, the filter.
pub(super) type Cached = (Instant, u64, Arc<BloomFilter>);

/// A filter cell and its version, as read (version 0: never written).
pub(super) fn read_partition(row: Option<&Row>, empty: &BloomFilter) -> Result<(u64, BloomFilter)> {
    let Some(row) = row else {
        return Ok((0, empty.clone()));
    };
    let version = row
        .latest(PART_FAMILY, VERSION)
        .and_then(|c| std::str::from_utf8(&c.value).ok()?.parse().ok())
        .unwrap_or(0);
    let filter = match row.latest(PART_FAMILY, FILTER) {
        Some(c) => BloomFilter::from_bytes(&c.value)
            .map_err(|e| crate::internal("corrupt partition", e))?,
        None => empty.clone(),
    };
    Ok((version, filter))
}

impl Sets {
    /// Keys grouped by partition: partition → indexes into `keys`.
    fn group<K: AsRef<[u8]>>(d: &SetDescription, keys: &[K]) -> Result<BTreeMap<u32, Vec<usize>>> {
        if keys.len() > MAX_KEYS_PER_CALL {
            return Err(EngineError::Invalid(format!(
                "at most {MAX_KEYS_PER_CALL} keys per call"
            )));
        }
        let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let p = partition_of(key_hash(k.as_ref()), d.partitions as usize) as u32;
            groups.entry(p).or_default().push(i);
        }
        Ok(groups)
    }

    /// Whether each key may be in the set (`BF.MEXISTS`).
    pub async fn exists<K: AsRef<[u8]>>(
        &self,
        app: &str,
        name: &str,
        keys: &[K],
    ) -> Result<Vec<bool>> {
        let mut d = self.describe(app, name).await?;
        let groups = Self::group(&d, keys)?;
        loop {
            match self.lookup(app, &d, &groups, keys).await? {
                Some(found) => return Ok(found),
                // A partition was missing and the set had switched generations: again, with
                // the generation it has now.
                None => d = self.read_description(app, name).await?,
            }
        }
    }

    /// Look keys up in the generation `d` names; `None` when a partition is missing from it
    /// and the set has moved to another generation since `d` was read (this node's copy was
    /// stale, and the old generation is deleted).
    async fn lookup<K: AsRef<[u8]>>(
        &self,
        app: &str,
        d: &SetDescription,
        groups: &BTreeMap<u32, Vec<usize>>,
        keys: &[K],
    ) -> Result<Option<Vec<bool>>> {
        let name = &d.name;
        let mut filters: HashMap<u32, Arc<BloomFilter>> = HashMap::new();
        let mut missing = Vec::new();
        for &p in groups.keys() {
            let row = keys::partition(app, name, d.generation, p);
            match self.partitions.get(&(row.clone(), d.generation)) {
                Some((at, _, f)) if at.elapsed() < self.ttl => {
                    filters.insert(p, f);
                }
                _ => missing.push((p, row)),
            }
        }
        if !missing.is_empty() {
            let request = ReadRows::new(RowSet::keys(missing.iter().map(|(_, r)| r.clone())));
            let rows = self.store.read_all(PARTITIONS_TABLE, request).await?;
            let by_key: HashMap<&Bytes, &Row> = rows.iter().map(|r| (&r.key, r)).collect();
            // A partition never written is empty — unless the generation is gone.
            if by_key.len() < missing.len()
                && self.read_description(app, name).await?.generation != d.generation
            {
                return Ok(None);
            }
            let empty = d.empty_partition()?;
            for (p, row) in missing {
                let (version, filter) = read_partition(by_key.get(&row).copied(), &empty)?;
                let filter = Arc::new(filter);
                self.remember((row, d.generation), version, filter.clone());
                filters.insert(p, filter);
            }
        }
        let mut out = vec![false; keys.len()];
        for (p, indexes) in groups {
            let filter = &filters[p];
            for &i in indexes {
                out[i] = filter.contains(keys[i].as_ref());
            }
        }
        Ok(Some(out))
    }

    /// Add keys (`BF.MADD`); each answer tells whether the key was new (as far as the filter
    /// can tell). Partitions are updated concurrently, each under optimistic concurrency, in the
    /// generation the set has now (read fresh, not from the cache).
    pub async fn add<K: AsRef<[u8]> + Sync>(
        &self,
        app: &str,
        name: &str,
        keys: &[K],
    ) -> Result<Vec<bool>> {
        let d = self.read_description(app, name).await?;
        let groups = Self::group(&d, keys)?;
        let updates = groups.into_iter().map(|(p, indexes)| {
            let d = d.clone();
            async move {
                let added = self.add_to_partition(app, &d, p, keys, &indexes).await?;
                Ok::<_, EngineError>((indexes, added))
            }
        });
        let mut out = vec![false; keys.len()];
        let mut new_keys = 0i64;
        for result in futures::future::join_all(updates).await {
            let (indexes, added) = result?;
            for (i, a) in indexes.into_iter().zip(added) {
                out[i] = a;
                new_keys += i64::from(a);
            }
        }
        if new_keys > 0 {
            self.store
                .read_modify_write_row(
                    SETS_TABLE,
                    keys::set(app, name),
                    vec![ReadModifyWriteRule::increment(FAMILY, KEYS, new_keys)],
                )
                .await?;
        }
        Ok(out)
    }

    async fn add_to_partition<K: AsRef<[u8]>>(
        &self,
        app: &str,
        d: &SetDescription,
        p: u32,
        keys: &[K],
        indexes: &[usize],
    ) -> Result<Vec<bool>> {
        let row = keys::partition(app, &d.name, d.generation, p);
        let empty = d.empty_partition()?;
        for _ in 0..ATTEMPTS {
            let stored = self
                .store
                .read_row(PARTITIONS_TABLE, row.clone(), None)
                .await?;
            let (version, mut filter) = read_partition(stored.as_ref(), &empty)?;
            let added: Vec<bool> = indexes
                .iter()
                .map(|&i| filter.insert(keys[i].as_ref()))
                .collect();
            if !added.contains(&true) {
                return Ok(added);
            }
            let cells = vec![Mutation::set_now(
                PART_FAMILY,
                Bytes::from_static(FILTER),
                filter.to_bytes(),
            )];
            if write_if_version(
                &*self.store,
                PARTITIONS_TABLE,
                row.clone(),
                PART_FAMILY,
                version,
                cells,
            )
            .await?
            {
                self.remember((row, d.generation), version + 1, Arc::new(filter));
                return Ok(added);
            }
        }
        Err(EngineError::Unavailable(
            "too many concurrent updates of one partition; retry".into(),
        ))
    }
}
