//! Checkpoints in a directory: `state.backend = "dir"`, one file per
//! instance, `<state.dir>/<instance>.ckpt`, written to a temporary name,
//! fsynced, renamed over the old one and the directory fsynced, so a crash
//! at any moment leaves either the old or the new checkpoint, never a mix.
//! Instances of one group share the directory (a shared volume, or one
//! host) to hand partitions over; a lock file per instance refuses a second
//! process with the same name.

use super::{Checkpoint, EXTENSION, Origin, StateError, encode, fingerprint, instance_name, read};
use crate::config::Config;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// An instance's place in `state.dir`: its checkpoint file and its lock.
#[derive(Debug)]
pub struct DirStore {
    pub dir: PathBuf,
    pub instance: String,
    fingerprint: String,
    /// Held for the process's life: two processes with one instance name
    /// would overwrite each other's checkpoints.
    _lock: File,
}

impl DirStore {
    /// Opens (creating) `state.dir` and takes this instance's lock.
    pub fn open(config: &Config) -> Result<DirStore, StateError> {
        let dir = PathBuf::from(&config.state.dir);
        let io = |cause| StateError::Io { dir: dir.clone(), cause };
        if let Err(cause) = std::fs::create_dir_all(&dir) {
            // create_dir_all on a file says only "File exists".
            let cause = if dir.is_file() {
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "is a file, not a directory")
            } else {
                cause
            };
            return Err(io(cause));
        }
        let instance = instance_name(config);
        let lock_path = dir.join(format!("{instance}.lock"));
        let lock = File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StateError::Locked { instance, dir: dir.clone(), lock: lock_path });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        Ok(DirStore { dir, instance, fingerprint: fingerprint(config), _lock: lock })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.{EXTENSION}", self.instance))
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// This instance's last checkpoint, if any.
    pub fn load_own(&self) -> Result<Option<Checkpoint>, StateError> {
        let path = self.path();
        if !path.exists() {
            return Ok(None);
        }
        let c = read(&path)?;
        if c.fingerprint != self.fingerprint {
            return Err(StateError::Incompatible {
                at: Origin::File(path),
                theirs: c.fingerprint,
                ours: self.fingerprint.clone(),
            });
        }
        Ok(Some(c))
    }

    /// Every compatible checkpoint in the directory (this instance's
    /// included); unreadable or incompatible ones are reported and skipped.
    pub fn load_all(&self) -> Vec<Checkpoint> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some(EXTENSION) {
                continue;
            }
            match read(&path) {
                Ok(c) if c.fingerprint == self.fingerprint => out.push(c),
                Ok(c) => {
                    tracing::warn!("ignoring checkpoint {} (other metric settings: {})", path.display(), c.fingerprint)
                }
                Err(e) => tracing::warn!("ignoring checkpoint: {e}"),
            }
        }
        out
    }

    /// Writes `checkpoint` atomically: temporary file, fsync, rename, fsync
    /// of the directory.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<usize, StateError> {
        let bytes = encode(checkpoint)?;
        let io = |cause| StateError::Io { dir: self.dir.clone(), cause };
        let tmp = self.dir.join(format!(".{}.{EXTENSION}.tmp", self.instance));
        let mut file = File::create(&tmp).map_err(io)?;
        file.write_all(&bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        std::fs::rename(&tmp, self.path()).map_err(io)?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(io)?;
        Ok(bytes.len())
    }
}
