//! Reading from the human at the controlling terminal: the guarded-mode factor code and
//! yes/no confirmations. Never an argument, an environment variable or a pipe.
//!
//! `/dev/tty` is the process's controlling terminal whatever stdin/stdout are; an agent
//! whose shell has none (no session with a tty) gets [`TtyError::NoTerminal`].

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};

use nix::sys::termios::{self, LocalFlags, SetArg};

/// Why nothing could be read from the human.
#[derive(Debug, thiserror::Error)]
pub enum TtyError {
    /// No controlling terminal (`/dev/tty` cannot be opened).
    #[error("no terminal: this needs a human at a terminal (the code is read from /dev/tty, never from an argument, the environment or a pipe): {0}")]
    NoTerminal(std::io::Error),
    /// The terminal could not be read or its echo switched off.
    #[error("cannot read from the terminal: {0}")]
    Io(String),
    /// The human typed nothing usable (end of input, or not six digits).
    #[error("no code was entered (six digits expected)")]
    NoCode,
}

fn open() -> Result<File, TtyError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(TtyError::NoTerminal)
}

/// Whether this process has a controlling terminal at all.
pub fn available() -> bool {
    open().is_ok()
}

/// Reads one line from the terminal after writing `prompt` to it; with `hidden`, the
/// terminal's echo is off while the human types.
fn read_line(prompt: &str, hidden: bool) -> Result<String, TtyError> {
    let mut tty = open()?;
    let saved = if hidden {
        let t = termios::tcgetattr(&tty).map_err(|e| TtyError::Io(e.to_string()))?;
        let mut quiet = t.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        quiet.local_flags.insert(LocalFlags::ECHONL);
        termios::tcsetattr(&tty, SetArg::TCSANOW, &quiet)
            .map_err(|e| TtyError::Io(e.to_string()))?;
        Some(t)
    } else {
        None
    };
    let read = (|| {
        tty.write_all(prompt.as_bytes())?;
        tty.flush()?;
        let mut line = String::new();
        BufReader::new(tty.try_clone()?).read_line(&mut line)?;
        Ok::<_, std::io::Error>(line)
    })();
    if let Some(t) = saved {
        let _ = termios::tcsetattr(&tty, SetArg::TCSANOW, &t);
    }
    read.map_err(|e| TtyError::Io(e.to_string()))
}

/// Asks the human for their six-digit TOTP code on the terminal, without echo.
pub fn read_code(prompt: &str) -> Result<String, TtyError> {
    let line = read_line(prompt, true)?;
    let code: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    if code.len() == 6 && code.bytes().all(|b| b.is_ascii_digit()) {
        Ok(code)
    } else {
        Err(TtyError::NoCode)
    }
}

/// Asks a yes/no question on the terminal; only `y` or `yes` is a yes.
pub fn confirm(question: &str) -> Result<bool, TtyError> {
    let line = read_line(&format!("{question} [y/N] "), false)?;
    Ok(matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
