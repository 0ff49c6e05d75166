use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::{Error, Gguf, Result, TensorInfo};

/// A GGUF file mapped into memory and parsed. Tensor bytes are borrowed from the map.
pub struct GgufFile {
    pub path: PathBuf,
    pub header: Gguf,
    mmap: Mmap,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let file = std::fs::File::open(&path).map_err(io)?;
        // SAFETY: the map is read-only; a model file changed under a running process is
        // outside what any mmap-based loader can defend against.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = Gguf::parse(&mmap)?;
        Ok(GgufFile { path, header, mmap })
    }

    /// The bytes of one tensor (bounds were checked at parse time).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.header.data_offset + info.offset) as usize;
        &self.mmap[start..start + info.n_bytes as usize]
    }

    /// A tensor by name with its bytes.
    pub fn tensor(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let info = self
            .header
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        Ok((info, self.tensor_bytes(info)))
    }

    /// The whole mapped file.
    pub fn bytes(&self) -> &[u8] {
        &self.mmap
    }

    /// Size of the whole file in bytes.
    pub fn file_len(&self) -> u64 {
        self.mmap.len() as u64
    }

    /// Drops the pages of `range` from this process's resident set (the data stays in the
    /// file; a later read maps it back in). For tensors copied elsewhere at load.
    pub fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        // SAFETY: the map is private and read-only, so dropping its pages loses nothing:
        // they are read back from the file if touched again.
        let _ = unsafe {
            self.mmap.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                range.start,
                range.len(),
            )
        };
    }

    /// Hints the kernel to read the tensor data ahead (sequential access at load).
    pub fn advise_willneed(&self) {
        #[cfg(unix)]
        let _ = self.mmap.advise(memmap2::Advice::WillNeed);
    }
}
