//! A configuration's mistakes: each with its file, line and key, all reported together.

use std::fmt;
use std::path::{Path, PathBuf};

/// One mistake in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column (in characters) on that line, when known.
    pub column: Option<usize>,
    /// The key, dotted (`watch[2].units`).
    pub key: String,
    /// What is wrong and what would be right.
    pub message: String,
}

/// A configuration that cannot be used: every problem found, with the file they are in.
#[derive(Debug, Clone)]
pub struct ConfigError {
    /// The file read, or `None` for built-in defaults.
    pub file: Option<PathBuf>,
    /// All problems found.
    pub problems: Vec<Problem>,
}

impl ConfigError {
    /// The problems of `file`, in the order they appear in it (those without a place last).
    pub(crate) fn new(file: Option<&Path>, mut problems: Vec<Problem>) -> ConfigError {
        problems.sort_by_key(|p| (p.line.is_none(), p.line, p.column));
        ConfigError {
            file: file.map(Path::to_path_buf),
            problems,
        }
    }

    pub(crate) fn unreadable(path: &Path, err: impl fmt::Display) -> ConfigError {
        ConfigError {
            file: Some(path.to_path_buf()),
            problems: vec![Problem {
                line: None,
                column: None,
                key: String::new(),
                message: format!("cannot read the configuration file: {err}"),
            }],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self
            .file
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "<built-in defaults>".into());
        if let [p] = self.problems.as_slice() {
            return write!(f, "invalid configuration {}", Located(&file, p));
        }
        write!(
            f,
            "invalid configuration: {} problems in {file}",
            self.problems.len()
        )?;
        for p in &self.problems {
            write!(f, "\n  {}", Located(&file, p))?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

struct Located<'a>(&'a str, &'a Problem);

impl fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Located(file, p) = self;
        write!(f, "{file}")?;
        match (p.line, p.column) {
            (Some(l), Some(c)) => write!(f, ":{l}:{c}")?,
            (Some(l), None) => write!(f, ":{l}")?,
            _ => {}
        }
        match p.key.is_empty() {
            false => write!(f, ": {}: {}", p.key, p.message),
            true => write!(f, ": {}", p.message),
        }
    }
}
