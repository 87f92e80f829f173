//! Progress on stderr: a bar redrawn in place with an ETA on a terminal, one plain line per
//! round otherwise (logs, pipes).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use super::rows::Row;

pub struct Progress {
    total: usize,
    done: usize,
    tty: bool,
    started: Instant,
    /// Rounds run by this process (resumed rows do not count toward the ETA).
    ran: usize,
}

impl Progress {
    pub fn new(total: usize, force_plain: bool) -> Progress {
        Progress {
            total,
            done: 0,
            tty: !force_plain && std::io::stderr().is_terminal(),
            started: Instant::now(),
            ran: 0,
        }
    }

    /// Shown before a round starts (terminal only).
    pub fn starting(&self, what: &str) {
        if self.tty {
            self.draw(what);
        }
    }

    /// A round finished with `row`.
    pub fn finished(&mut self, row: &Row) {
        self.done += 1;
        self.ran += 1;
        let what = format!("{} {}", row.tensor, row.ggml_type);
        let result = if row.ok {
            format!(
                "PPL {} KLD {} top1 {}%",
                fmt(row.ppl, 4),
                fmt(row.kld, 6),
                fmt(row.top1, 2)
            )
        } else {
            format!("FAILED: {}", row.reason)
        };
        if self.tty {
            // Clear the bar, print the result line, redraw the bar below it.
            eprint!("\r\x1b[2K");
            eprintln!(
                "[{}/{}] {what}: {result} ({:.2} s)",
                self.done, self.total, row.seconds
            );
            if self.done < self.total {
                self.draw("");
            }
        } else {
            eprintln!(
                "sweep: [{}/{}] {what}: {result} ({:.2} s, ETA {})",
                self.done,
                self.total,
                row.seconds,
                self.eta().map_or("-".into(), human)
            );
        }
    }

    pub fn finish(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }

    fn eta(&self) -> Option<Duration> {
        if self.ran == 0 {
            return None;
        }
        let per = self.started.elapsed() / self.ran as u32;
        Some(per * (self.total - self.done) as u32)
    }

    fn draw(&self, what: &str) {
        const WIDTH: usize = 30;
        let filled = (self.done * WIDTH)
            .checked_div(self.total)
            .unwrap_or(WIDTH)
            .min(WIDTH);
        let bar: String = "#".repeat(filled) + &" ".repeat(WIDTH - filled);
        let pct = if self.total == 0 {
            100.0
        } else {
            100.0 * self.done as f64 / self.total as f64
        };
        eprint!(
            "\r\x1b[2K[{bar}] {}/{} {pct:3.0}% ETA {} {what}",
            self.done,
            self.total,
            self.eta().map_or("-".into(), human)
        );
        let _ = std::io::stderr().flush();
    }
}

fn fmt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// "45 s", "12 min 3 s", "2 h 5 min".
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{} h {} min", s / 3600, (s % 3600) / 60)
    }
}
