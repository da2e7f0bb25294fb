//! Backups of the node's store: taken online, listed, restored ([`crate::backup`] holds their
//! folder layout and manifest).

use crate::backup::{BackupInfo, INFO_FILE, STORES, io, list, name_at, size_of};
use crate::internal;
use crate::{Engine, EngineError, Result};
use std::path::Path;

/// Backups.
impl Engine {
    /// The node's backup folder, or why it has none.
    pub(crate) fn backup_dir(&self) -> Result<&Path> {
        self.backup_dir.as_deref().ok_or_else(|| {
            EngineError::Refused("this node has no backup folder (store.backup_dir)".into())
        })
    }

    /// The backups in the node's backup folder, oldest first.
    pub fn backups(&self) -> Result<Vec<BackupInfo>> {
        list(self.backup_dir()?)
    }

    /// Take a backup of the node's store into a new folder of its backup folder, online: every
    /// target as of one moment (targets one after the other). Refused (with how to back it up
    /// instead) by a store without checkpoints.
    pub async fn backup(&self) -> Result<BackupInfo> {
        let dir = self.backup_dir()?;
        let name = name_at(self.clock.now_ms());
        let path = dir.join(&name);
        if path.exists() {
            return Err(EngineError::Exists(format!(
                "a backup named {name} exists already"
            )));
        }
        // Counts kept in memory go in too.
        self.flush_tallies().await?;
        let targets = self.residency.targets();
        // With targets, the placed store writes `stores/<target>` itself.
        let stores = path.join(STORES);
        let dest = if self.residency.has_targets() {
            stores
        } else {
            stores.join(&targets[0])
        };
        let taken = self.store.checkpoint(&dest).await;
        if let Err(e) = taken {
            let _ = std::fs::remove_dir_all(&path);
            return Err(match e {
                penchant_store::StoreError::FailedPrecondition(m) => EngineError::Refused(m),
                other => other.into(),
            });
        }
        let mut info = BackupInfo {
            name,
            created_at: self.clock.now_ms(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            targets,
            size_bytes: 0,
            path: path.clone(),
        };
        info.size_bytes = size_of(&path).map_err(|e| io("cannot read", &path, e))?;
        let text = serde_json::to_vec_pretty(&info).map_err(|e| internal("backup info", e))?;
        std::fs::write(path.join(INFO_FILE), text)
            .map_err(|e| io("cannot write", &path.join(INFO_FILE), e))?;
        tracing::info!(backup = %path.display(), bytes = info.size_bytes, "backup taken");
        Ok(info)
    }
}
