//! Careful reading ([`read_regular`]): every watched or configured file is read through it,
//! so that nothing put in a file's place (a FIFO, a device, a symlink swapped in, a file
//! growing without end) can stop a pass or the CLI.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Whether [`read_regular`] follows a symlink at the path: `No` where the path was listed as
/// a regular file or resolved already (a symlink there now was swapped in since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    Yes,
    No,
}

/// Why [`read_regular`] read nothing.
#[derive(Debug)]
pub enum ReadError {
    /// Opening or reading failed (missing, permission denied, ...).
    Io(std::io::Error),
    /// A symlink where none is followed ([`Follow::No`]).
    Symlink,
    /// Something else than a regular file: what it is.
    NotRegular(&'static str),
    /// Longer than the bound: its size when known.
    TooLarge { max: u64, len: Option<u64> },
    /// A file of a kernel interface filesystem (`procfs`, `sysfs`, ...): its name.
    KernelFs(&'static str),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Symlink => write!(
                f,
                "not a regular file: a symlink now (put in its place after it was listed)"
            ),
            ReadError::NotRegular(what) => write!(f, "not a regular file ({what})"),
            ReadError::TooLarge {
                max,
                len: Some(len),
            } => {
                write!(
                    f,
                    "too large: {len} bytes, larger than the {max} bytes read at most"
                )
            }
            ReadError::TooLarge { max, len: None } => write!(
                f,
                "too large: larger than the {max} bytes read at most (it grew while being read)"
            ),
            ReadError::KernelFs(fs) => write!(
                f,
                "not a file of data: it is on {fs}, a kernel interface, where a read can have effects (/proc/kmsg consumes the kernel's messages); not read"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// What a file that is not a regular file is, in words.
pub fn kind_of(t: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match t {
        t if t.is_fifo() => "a FIFO",
        t if t.is_socket() => "a socket",
        t if t.is_char_device() => "a character device",
        t if t.is_block_device() => "a block device",
        t if t.is_dir() => "a directory",
        t if t.is_symlink() => "a symlink",
        _ => "not a file",
    }
}

/// Kernel filesystems whose files are interfaces, not data: a read can have effects
/// (`/proc/kmsg` consumes the kernel's messages) or block. Their magic numbers as
/// fstatfs(2) gives them (`linux/magic.h`). tmpfs, overlayfs and NFS hold data and are read.
const KERNEL_FS: &[(u32, &str)] = &[
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7363_6673, "securityfs"),
    (0x0027_e0eb, "cgroupfs"),
    (0x6367_7270, "cgroup2fs"),
    (0x7472_6163, "tracefs"),
    (0xcafe_4a11, "bpffs"),
    (0x6265_6570, "configfs"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstorefs"),
    (0x1cd1, "devpts"),
    (0x6573_5543, "fusectl"),
];

/// The name of the kernel interface filesystem `file` is on, if it is on one.
fn kernel_fs(file: &fs::File) -> Option<&'static str> {
    let magic = rustix::fs::fstatfs(file).ok()?.f_type as u32;
    KERNEL_FS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

/// The whole of the regular file `path`, at most `max` bytes. Opened without blocking (a
/// FIFO's open waits for a writer; a device's may too), without following a symlink at
/// `path` unless `follow` says so, then looked at through the open file: anything but a
/// regular file is refused before one byte is read, and so is a file on a kernel interface
/// filesystem (procfs, sysfs, ...: [`KERNEL_FS`]); a file longer than `max` (or growing
/// past it while read) is refused too. Each call is a step of the pass in progress
/// ([`crate::progress`]).
pub fn read_regular(path: &Path, max: u64, follow: Follow) -> Result<Vec<u8>, ReadError> {
    crate::progress::step();
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) if follow == Follow::No => ReadError::Symlink,
            _ => ReadError::Io(e),
        })?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(kind_of(meta.file_type())));
    }
    if let Some(fs) = kernel_fs(&file) {
        return Err(ReadError::KernelFs(fs));
    }
    if meta.len() > max {
        return Err(ReadError::TooLarge {
            max,
            len: Some(meta.len()),
        });
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut data)
        .map_err(ReadError::Io)?;
    if data.len() as u64 > max {
        return Err(ReadError::TooLarge { max, len: None });
    }
    Ok(data)
}

/// Files larger than this are not read (no certificate, key, kubeconfig, manifest or record
/// is anywhere near it).
pub const MAX_FILE_SIZE: u64 = 8 * 1024 * 1024;

/// [`read_regular`] in place of `std::fs::read` for a file that may be a symlink (a
/// certificate, key or kubeconfig the scan found, a manifest, a record), at most
/// [`MAX_FILE_SIZE`]: what is not a regular file or is too large is an
/// error of kind `InvalidData` saying so.
pub fn read(path: impl AsRef<Path>) -> std::io::Result<Vec<u8>> {
    read_regular(path.as_ref(), MAX_FILE_SIZE, Follow::Yes).map_err(|e| match e {
        ReadError::Io(e) => e,
        other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
    })
}

/// [`read`] as text (lossless: not UTF-8 is an error).
pub fn read_to_string(path: impl AsRef<Path>) -> std::io::Result<String> {
    String::from_utf8(read(path)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of a kernel interface (a `*.pem` symlink to `/proc/kmsg` would consume the
    /// kernel's messages) is refused before a byte is read; a file elsewhere is read.
    #[test]
    fn a_file_on_a_kernel_interface_filesystem_is_not_read() {
        let proc = read_regular(Path::new("/proc/self/status"), 1 << 20, Follow::Yes);
        assert!(
            matches!(proc, Err(ReadError::KernelFs("procfs"))),
            "{proc:?}"
        );
        let said = proc.unwrap_err().to_string();
        assert!(said.contains("on procfs, a kernel interface"), "{said}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.pem");
        fs::write(&file, b"data").unwrap();
        let link = dir.path().join("kmsg.pem");
        std::os::unix::fs::symlink("/proc/self/status", &link).unwrap();
        assert_eq!(read_regular(&file, 1 << 20, Follow::Yes).unwrap(), b"data");
        assert!(matches!(
            read_regular(&link, 1 << 20, Follow::Yes),
            Err(ReadError::KernelFs("procfs"))
        ));
    }

    #[test]
    fn only_a_bounded_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.crt");
        fs::write(&file, b"12345").unwrap();
        let link = dir.path().join("link.crt");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let said = |r: Result<Vec<u8>, ReadError>| match r {
            Ok(b) => format!("read {} bytes", b.len()),
            Err(e) => e.to_string(),
        };
        assert_eq!(said(read_regular(&file, 5, Follow::No)), "read 5 bytes");
        assert_eq!(said(read_regular(&link, 5, Follow::Yes)), "read 5 bytes");
        assert_eq!(
            said(read_regular(&link, 5, Follow::No)),
            "not a regular file: a symlink now (put in its place after it was listed)"
        );
        assert_eq!(
            said(read_regular(&file, 4, Follow::No)),
            "too large: 5 bytes, larger than the 4 bytes read at most"
        );
        assert_eq!(
            said(read_regular(Path::new("/dev/zero"), 4, Follow::Yes)),
            "not a regular file (a character device)"
        );
        assert_eq!(
            said(read_regular(dir.path(), 4, Follow::Yes)),
            "not a regular file (a directory)"
        );
        let e = read(dir.path().join("gone.crt")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
