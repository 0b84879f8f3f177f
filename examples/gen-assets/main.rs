//! Writes the man pages (certrenewd(8) and one per command) and the shell completions,
//! generated from the clap definitions, into the directory given (used by packaging:
//! `target/assets`).

mod man;

use std::fs;
use std::path::PathBuf;

use clap::CommandFactory;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/assets".into()),
    );
    fs::create_dir_all(&dir)?;
    for (name, page) in man::pages()? {
        fs::write(dir.join(name), page)?;
    }
    let cmd = certrenewd::cli::Cli::command();
    for (shell, name) in [
        (clap_complete::Shell::Bash, "certrenewd.bash"),
        (clap_complete::Shell::Zsh, "_certrenewd"),
        (clap_complete::Shell::Fish, "certrenewd.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), "certrenewd", &mut out);
        fs::write(dir.join(name), out)?;
    }
    println!("wrote {}", dir.display());
    Ok(())
}
