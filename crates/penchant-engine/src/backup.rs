//! Backups of a node's embedded store: taken online ([`Engine::backup`], RocksDB's checkpoint
//! of every target, each as of one moment while writes go on), restored offline ([`restore`],
//! by `penchant backup restore` into empty folders).
//!
//! A backup is a folder of the node's backup folder, named after the moment it was taken:
//!
//! | path | what |
//! |---|---|
//! | `penchant-backup.json` | [`BackupInfo`]: when, by which version, which targets |
//! | `stores/<target>/` | a RocksDB store, one per placement target (`default` alone without targets) |
//!
//! Its SST files are hard links to the store's own when the backup folder is on the store's
//! file system (a backup then takes no room until compactions replace the files), copies
//! otherwise. A Bigtable instance is backed up by Bigtable (`gcloud bigtable backups create`);
//! one app moves between any two stores with [`crate::portability`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::internal;
use crate::{EngineError, Result};

/// The description a backup carries.
pub const INFO_FILE: &str = "penchant-backup.json";
/// The folder of a backup holding its stores.
pub const STORES: &str = "stores";

/// A backup, as `penchant-backup.json` and the API describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupInfo {
    /// The folder's name in the backup folder.
    pub name: String,
    /// Unix milliseconds when it was taken.
    pub created_at: i64,
    /// The Penchant version that took it.
    pub version: String,
    /// The placement targets it holds, the default first (each in `stores/<target>`).
    pub targets: Vec<String>,
    /// Bytes of its files (hard-linked files count whole).
    #[serde(default)]
    pub size_bytes: u64,
    /// Where it is, on the node that took it.
    #[serde(default)]
    pub path: PathBuf,
}

pub(crate) fn io(what: &str, path: &Path, e: std::io::Error) -> EngineError {
    internal(&format!("{what} {}", path.display()), e)
}

/// Bytes of the files under `path`.
pub(crate) fn size_of(path: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            size_of(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// A backup's name: `penchant-` and the UTC moment, to the millisecond, without colons.
pub(crate) fn name_at(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0).unsigned_abs());
    let stamp = humantime::format_rfc3339_millis(at).to_string();
    format!("penchant-{}", stamp.replace(':', ""))
}

/// The backup in `path`, as its description says.
pub fn read_info(path: &Path) -> Result<BackupInfo> {
    let file = path.join(INFO_FILE);
    let text = std::fs::read(&file).map_err(|e| {
        EngineError::Invalid(format!(
            "{} is not a Penchant backup (no {INFO_FILE}: {e})",
            path.display()
        ))
    })?;
    let mut info: BackupInfo = serde_json::from_slice(&text)
        .map_err(|e| EngineError::Invalid(format!("{} cannot be read: {e}", file.display())))?;
    info.path = path.to_path_buf();
    Ok(info)
}

/// The backups in `dir`, oldest first (none if the folder does not exist).
pub fn list(dir: &Path) -> Result<Vec<BackupInfo>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("cannot read", dir, e)),
    };
    let mut backups = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| io("cannot read", dir, e))?.path();
        if path.join(INFO_FILE).is_file() {
            backups.push(read_info(&path)?);
        }
    }
    backups.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
    Ok(backups)
}

/// Copy a backup's stores into the folders `folder_of` names for each target (each must be
/// absent or empty: a restore never overwrites a store). Returns the folders written. The
/// node must be stopped (RocksDB's lock on a live folder makes the folder count as not
/// empty anyway).
pub fn restore(
    backup: &Path,
    folder_of: impl Fn(&str) -> Option<PathBuf>,
) -> Result<Vec<(String, PathBuf)>> {
    let info = read_info(backup)?;
    let mut plan = Vec::with_capacity(info.targets.len());
    for target in &info.targets {
        let from = backup.join(STORES).join(target);
        if !from.is_dir() {
            return Err(EngineError::Invalid(format!(
                "the backup lists target `{target}` but has no {}",
                from.display()
            )));
        }
        let to = folder_of(target).ok_or_else(|| {
            EngineError::Invalid(format!(
                "the backup holds target `{target}`, which this configuration does not have \
                 as a folder (placement.targets.{target}.data_dir)"
            ))
        })?;
        let empty = match std::fs::read_dir(&to) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(io("cannot read", &to, e)),
        };
        if !empty {
            return Err(EngineError::Refused(format!(
                "{} is not empty: a restore never overwrites a store; stop the server and move \
                 the folder aside, or restore into another --data-dir",
                to.display()
            )));
        }
        plan.push((target.clone(), from, to));
    }
    for (_, from, to) in &plan {
        copy_dir(from, to).map_err(|e| io("cannot copy the backup into", to, e))?;
    }
    Ok(plan.into_iter().map(|(t, _, to)| (t, to)).collect())
}

/// Copy a folder's files (a store's folder has no subfolders, but they are followed).
pub(crate) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_as_time_and_hold_no_colon() {
        let a = name_at(1_795_000_000_000);
        let b = name_at(1_795_000_000_001);
        assert_eq!(a, "penchant-2026-11-18T110640.000Z");
        assert!(a < b);
    }

    #[test]
    fn a_restore_never_overwrites_and_names_what_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let backup = dir.path().join("b");
        std::fs::create_dir_all(backup.join(STORES).join("default")).unwrap();
        std::fs::write(backup.join(STORES).join("default").join("CURRENT"), "x").unwrap();
        let info = BackupInfo {
            name: "b".into(),
            created_at: 1,
            version: "0".into(),
            targets: vec!["default".into(), "eu".into()],
            size_bytes: 1,
            path: PathBuf::new(),
        };
        std::fs::write(backup.join(INFO_FILE), serde_json::to_vec(&info).unwrap()).unwrap();
        let e = restore(&backup, |_| Some(dir.path().join("x"))).unwrap_err();
        assert!(e.to_string().contains("has no"), "{e}");

        std::fs::create_dir_all(backup.join(STORES).join("eu")).unwrap();
        let e = restore(&backup, |t| (t == "default").then(|| dir.path().join("d")));
        assert!(e.unwrap_err().to_string().contains("`eu`"));

        let busy = dir.path().join("busy");
        std::fs::create_dir_all(&busy).unwrap();
        std::fs::write(busy.join("LOCK"), "").unwrap();
        let e = restore(&backup, |t| Some(busy.join("..").join(format!("{t}-x"))))
            .map(|_| ())
            .and_then(|()| restore(&backup, |_| Some(busy.clone())));
        assert!(e.unwrap_err().to_string().contains("is not empty"));
        // The first restore wrote both targets; nothing of the refused one.
        assert!(dir.path().join("default-x").join("CURRENT").is_file());
        assert!(!busy.join("CURRENT").exists());
    }
}
