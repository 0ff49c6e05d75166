use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::{Error, Gguf, Result, TensorInfo};

/// How a model file's bytes are held (llama.cpp's `--load-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LoadMode {
    /// Mapped: pages read from the file as they are touched, dropped under pressure.
    #[default]
    Mmap,
    /// Mapped and locked in memory (`mlock`, also `mmap+mlock`): never paged out.
    Mlock,
    /// Read whole into the process's memory, no map.
    None,
}

impl LoadMode {
    /// `mmap`, `mlock`, `mmap+mlock` or `none`.
    pub fn parse(s: &str) -> std::result::Result<LoadMode, String> {
        match s {
            "mmap" | "auto" => Ok(LoadMode::Mmap),
            "mlock" | "mmap+mlock" => Ok(LoadMode::Mlock),
            "none" => Ok(LoadMode::None),
            _ => Err(format!(
                "'{s}' is not a load mode (mmap, mlock, mmap+mlock or none)"
            )),
        }
    }
}

/// The bytes of an open file.
enum Storage {
    Map(Mmap),
    Read(Vec<u8>),
}

/// A GGUF file mapped into memory (or read into it) and parsed. Tensor bytes are borrowed
/// from it.
pub struct GgufFile {
    pub path: PathBuf,
    pub header: Gguf,
    storage: Storage,
}

impl GgufFile {
    /// The file at `path`, mapped.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, LoadMode::Mmap)
    }

    /// The file at `path`, held as `mode` says; locking a map the system refuses to lock
    /// (`RLIMIT_MEMLOCK`) is an error.
    pub fn open_with(path: impl AsRef<Path>, mode: LoadMode) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let storage = match mode {
            LoadMode::None => Storage::Read(std::fs::read(&path).map_err(io)?),
            LoadMode::Mmap | LoadMode::Mlock => {
                let file = std::fs::File::open(&path).map_err(io)?;
                // SAFETY: the map is read-only; a model file changed under a running
                // process is outside what any mmap-based loader can defend against.
                let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
                if mode == LoadMode::Mlock {
                    mmap.lock()
                        .map_err(|e| io(std::io::Error::new(e.kind(), format!("mlock: {e}"))))?;
                }
                Storage::Map(mmap)
            }
        };
        let header = Gguf::parse(match &storage {
            Storage::Map(m) => m,
            Storage::Read(v) => v,
        })?;
        Ok(GgufFile {
            path,
            header,
            storage,
        })
    }

    /// The bytes of one tensor (bounds were checked at parse time).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.header.data_offset + info.offset) as usize;
        &self.bytes()[start..start + info.n_bytes as usize]
    }

    /// A tensor by name with its bytes.
    pub fn tensor(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let info = self
            .header
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        Ok((info, self.tensor_bytes(info)))
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Map(m) => m,
            Storage::Read(v) => v,
        }
    }

    /// Size of the whole file in bytes.
    pub fn file_len(&self) -> u64 {
        self.bytes().len() as u64
    }

    /// Drops the pages of `range` from this process's resident set (the data stays in the
    /// file; a later read maps it back in). For tensors copied elsewhere at load; nothing
    /// for a file read into memory or locked.
    pub fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Storage::Map(mmap) = &self.storage {
            // SAFETY: the map is private and read-only, so dropping its pages loses
            // nothing: they are read back from the file if touched again (a locked map
            // keeps them).
            let _ = unsafe {
                mmap.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    range.start,
                    range.len(),
                )
            };
        }
    }

    /// Hints the kernel to read the tensor data ahead (sequential access at load).
    pub fn advise_willneed(&self) {
        #[cfg(unix)]
        if let Storage::Map(mmap) = &self.storage {
            let _ = mmap.advise(memmap2::Advice::WillNeed);
        }
    }
}
