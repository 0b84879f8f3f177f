//! An error with its causes on one line, as `{:#}` prints them, without saying one twice.
//! Some errors print their source inside their own text and return it as their source too
//! (zbus's `I/O error: …`), so `{:#}` reads "I/O error: No such file or directory (os
//! error 2): No such file or directory (os error 2)".

use std::fmt;

/// Displays as `{:#}` of the error, a cause left out when the one before ends with it.
pub struct Causes<'a>(pub &'a anyhow::Error);

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous: Option<String> = None;
        for cause in self.0.chain() {
            let text = cause.to_string();
            match &previous {
                Some(p) if p.ends_with(&text) => {}
                Some(_) => write!(f, ": {text}")?,
                None => f.write_str(&text)?,
            }
            previous = Some(text);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_cause_its_error_already_said_is_said_once() {
        let io = std::io::Error::from_raw_os_error(2);
        let e = anyhow::Error::new(zbus::Error::InputOutput(Arc::new(io)))
            .context("connecting to the D-Bus system bus at unix:path=/x");
        assert_eq!(
            format!("{e:#}"),
            "connecting to the D-Bus system bus at unix:path=/x: I/O error: No such file or directory (os error 2): No such file or directory (os error 2)",
            "zbus says it twice"
        );
        assert_eq!(
            Causes(&e).to_string(),
            "connecting to the D-Bus system bus at unix:path=/x: I/O error: No such file or directory (os error 2)"
        );
        // Causes that are not repeats are all said.
        let e = anyhow::anyhow!("refused")
            .context("restarting etcd.service")
            .context("pass");
        assert_eq!(
            Causes(&e).to_string(),
            "pass: restarting etcd.service: refused"
        );
    }
}
