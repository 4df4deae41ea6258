//! Child processes with deadlines: every program the suite starts (`ping`, `ip`, the `vfio-nic`
//! tool, each test's own process) is waited for at most a stated time, then killed together with
//! everything it started, and the error names what was waited for.
//!
//! Why process groups and sessions: a test that runs `sh -c "ping ..."` or the `vfio-nic` tool
//! must not leave a process behind that holds a VFIO device or a pipe open when it is stopped.
//! Every child a test starts is the leader of its own process group, and stopping it sends
//! `SIGKILL` to the whole group. Each test itself runs in a session of its own (it calls
//! `setsid` first thing, see hwtests/main.rs), so the runner can stop a test together with every
//! group the test started: [`kill_session`] kills every process of the session.
//! Output is read by one thread per pipe, so a child that writes more than a pipe buffer never
//! blocks, and a grandchild that keeps a pipe open cannot make a read wait for ever.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// How long a killed process group gets to disappear before we give up on it.
const REAP_LIMIT: Duration = Duration::from_secs(10);
/// How long pipe readers may take to see end-of-file once their process has exited.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// What a finished (or stopped) child printed, and how it ended.
#[derive(Debug)]
pub struct Finished {
    /// Exit status; `None` when the process could not be reaped even after `SIGKILL`.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    /// Whether the deadline passed and the group was killed.
    pub timed_out: bool,
}

impl Finished {
    /// Whether it exited by itself with status 0.
    pub fn success(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    /// stdout and stderr together, trimmed (for error messages).
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr).trim().to_string()
    }
}

/// A running child in its own process group, with its output collected in the background.
pub struct Bounded {
    what: String,
    child: Child,
    stdout: Option<Reader>,
    stderr: Option<Reader>,
    /// stdout's lines as they arrive (see [`Bounded::wait_line`]).
    lines: mpsc::Receiver<String>,
}

type Reader = (mpsc::Receiver<()>, JoinHandle<Vec<u8>>);

/// Collects a pipe to its end in a thread; every complete line also goes to `lines`.
fn reader(pipe: impl Read + Send + 'static, lines: Option<mpsc::Sender<String>>) -> Reader {
    let (done_tx, done_rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut r = BufReader::new(pipe);
        loop {
            let start = buf.len();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Some(tx) = &lines {
                        let _ = tx.send(String::from_utf8_lossy(&buf[start..]).into_owned());
                    }
                }
            }
        }
        let _ = done_tx.send(());
        buf
    });
    (done_rx, h)
}

/// Takes what a reader collected if it reached end-of-file within `grace`; an empty text and a
/// note otherwise (the thread is left to end when the last writer goes away).
fn collect(r: Option<Reader>, grace: Duration) -> String {
    let Some((done, h)) = r else {
        return String::new();
    };
    match done.recv_timeout(grace) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            String::from_utf8_lossy(&h.join().unwrap_or_default()).into_owned()
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            "[output not collected: the pipe stayed open]".to_string()
        }
    }
}

impl Bounded {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `cmd` (stdin from /dev/null, stdout and stderr collected) as the leader of a new
    /// process group. `what` names it in errors.
    pub fn spawn(what: impl Into<String>, cmd: &mut Command) -> Result<Bounded, String> {
        let what = what.into();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let (lines_tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().map(|p| reader(p, Some(lines_tx)));
        let stderr = child.stderr.take().map(|p| reader(p, None));
        Ok(Bounded {
            what,
            child,
            stdout,
            stderr,
            lines,
        })
    }

    /// Waits at most `limit` for a line of stdout that satisfies `pred` (e.g. the first status
    /// line of a tool that prints one once it is serving). The line, or an error naming what
    /// was waited for; an error too when the child exits first.
    pub fn wait_line(
        &mut self,
        what: &str,
        limit: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(l) if pred(&l) => return Ok(l),
                // Checked below even when lines keep coming (a chatty child must not keep
                // this loop from seeing its deadline).
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(format!("{} closed its output before {what}", self.what))
                }
            }
            if let Ok(Some(s)) = self.child.try_wait() {
                // What it printed just before it exited still counts.
                while let Ok(l) = self.lines.try_recv() {
                    if pred(&l) {
                        return Ok(l);
                    }
                }
                return Err(format!("{} exited ({s}) before {what}", self.what));
            }
            if left.is_zero() {
                return Err(format!(
                    "{} did not show {what} within {} s",
                    self.what,
                    limit.as_secs()
                ));
            }
        }
    }

    /// The child's exit status if it has exited (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `sig` to the child alone (e.g. `SIGINT`, as Ctrl-C would).
    /// The pid is our own unreaped child, so it cannot have been reused by another process.
    pub fn signal(&self, sig: Signal) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), sig);
    }

    /// Waits until the child exits or `limit` has passed since now; on the deadline the whole
    /// group is killed. Either way every process of the group is gone (or reported stuck)
    /// when this returns.
    pub fn finish(mut self, limit: Duration) -> Finished {
        let deadline = Instant::now() + limit;
        let mut status = None;
        let mut timed_out = false;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => {
                    status = Some(s);
                    break;
                }
                Ok(None) => {}
                Err(_) => break,
            }
            if Instant::now() >= deadline {
                timed_out = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever the child started goes too (a grandchild holding a device or a pipe). The
        // leader may be reaped already; its group id cannot be taken by a new group while the
        // group has members, and signalling an empty group fails harmlessly.
        kill_group(self.child.id());
        if status.is_none() {
            status = reap(&mut self.child, REAP_LIMIT);
        }
        wait_group_gone(self.child.id(), REAP_LIMIT);
        Finished {
            status,
            stdout: collect(self.stdout.take(), PIPE_GRACE),
            stderr: collect(self.stderr.take(), PIPE_GRACE),
            timed_out,
        }
    }

    /// [`Bounded::finish`], turned into an error naming the child when it timed out (whatever
    /// its exit status otherwise).
    pub fn finish_within(self, limit: Duration) -> Result<Finished, String> {
        let what = self.what.clone();
        let f = self.finish(limit);
        if f.timed_out {
            return Err(format!(
                "{what} did not finish within {} s and was killed; it had printed: {}",
                limit.as_secs(),
                f.text()
            ));
        }
        Ok(f)
    }

    /// [`Bounded::finish_within`], with an error too when the child could not be reaped or
    /// exited unsuccessfully.
    pub fn finish_ok(self, limit: Duration) -> Result<Finished, String> {
        let what = self.what.clone();
        let f = self.finish_within(limit)?;
        match f.status {
            None => Err(format!(
                "{what} could not be reaped even after SIGKILL (stuck in the kernel?)"
            )),
            Some(s) if !s.success() => Err(format!("{what} failed ({s}): {}", f.text())),
            Some(_) => Ok(f),
        }
    }
}

impl Drop for Bounded {
    /// A child that is dropped without [`Bounded::finish`] (an early `?` return) is killed with
    /// its group, so no test leaves a process behind.
    fn drop(&mut self) {
        kill_group(self.child.id());
        let _ = reap(&mut self.child, REAP_LIMIT);
    }
}

/// The lines of `pipe` (each with its end of line) as they arrive, read by a thread of its own
/// until end-of-file: how the suite runner follows a test process's output.
pub fn lines_of(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    reader(pipe, Some(tx));
    rx
}

/// Starts `cmd` with stdout piped (for the caller to read) and stderr passed through: how the
/// runner starts each test's own process, which then makes itself a session leader.
pub fn spawn_with_stdout(cmd: &mut Command) -> Result<Child, String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the test process: {e}"))
}

/// Runs `cmd` to completion within `limit`; its output, or an error naming `what`.
pub fn run(what: &str, cmd: &mut Command, limit: Duration) -> Result<Finished, String> {
    Bounded::spawn(what, cmd)?.finish_ok(limit)
}

/// Sends `SIGKILL` to process group `pgid` (harmless when it is already empty).
/// The group id is that of a child we started as a group leader: it is not reused while its
/// leader is unreaped, and after that a signal to an empty group fails with ESRCH.
pub fn kill_group(pgid: u32) {
    let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
}

/// Waits for `child` at most `limit`; its status, or `None` if it never exited.
pub fn reap(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Which id a process is matched by in [`members`].
#[derive(Clone, Copy)]
pub enum Scope {
    /// Its process group id.
    Group,
    /// Its session id.
    Session,
}

/// Process ids of the live (not zombie) processes whose group or session id is `id`, from
/// /proc (`/proc/PID/stat`: "pid (comm) state ppid pgrp session ..."; comm may hold spaces and
/// parentheses, so the fields are counted from the last ')').
pub fn members(scope: Scope, id: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let field = match scope {
        Scope::Group => 2,
        Scope::Session => 3,
    };
    let id = id.to_string();
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.len() > field && f[0] != "Z" && f[field] == id
        })
        .collect()
}

/// What `pids` are and where they wait, for messages: "PID (comm) state S in WCHAN" (state
/// `D` with a kernel function says a process is stuck in the kernel, and where).
pub fn describe(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| {
            let read =
                |f: &str| std::fs::read_to_string(format!("/proc/{p}/{f}")).unwrap_or_default();
            let comm = read("comm");
            let stat = read("stat");
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .unwrap_or("?")
                .to_string();
            let wchan = read("wchan");
            let wchan = match wchan.trim() {
                "" | "0" => String::new(),
                w => format!(" in {w}"),
            };
            format!("{p} ({}) state {state}{wchan}", comm.trim())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits at most `limit` until no live process matches `scope`/`id`; the ones left, if any.
/// (A killed process releases its files, VFIO devices included, before it becomes a zombie.)
pub fn wait_gone(scope: Scope, id: u32, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let left = members(scope, id);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits at most `limit` until group `pgid` has no live member; returns whether it is empty.
pub fn wait_group_gone(pgid: u32, limit: Duration) -> bool {
    wait_gone(Scope::Group, pgid, limit).is_empty()
}

/// Sends `SIGKILL` to every process of session `sid` (the test's own process and every group
/// it started), then waits at most `limit` for them to go. Returns the processes still alive
/// after that (stuck in the kernel), with their names.
pub fn kill_session(sid: u32, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left = members(Scope::Session, sid);
        if left.is_empty() {
            return None;
        }
        if Instant::now() >= deadline {
            return Some(describe(&left));
        }
        for p in &left {
            let _ = kill(Pid::from_raw(*p as i32), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_past_its_deadline_is_killed_with_its_group() {
        let t0 = Instant::now();
        let b = Bounded::spawn(
            "sleeper",
            Command::new("sh").args(["-c", "sleep 30 & sleep 30; echo never"]),
        )
        .unwrap();
        let pgid = b.child.id();
        let f = b.finish(Duration::from_millis(300));
        assert!(f.timed_out && !f.success());
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(
            members(Scope::Group, pgid).is_empty(),
            "the background sleep survived"
        );
    }

    #[test]
    fn output_is_collected_and_failures_are_named() {
        let f = run(
            "echo",
            Command::new("sh").args(["-c", "echo hi"]),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(f.stdout, "hi\n");
        let e = run(
            "false-ish",
            Command::new("sh").args(["-c", "echo oops >&2; exit 3"]),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(e.contains("false-ish") && e.contains("oops"), "{e}");
    }

    #[test]
    fn a_grandchild_holding_the_pipe_does_not_block_the_read() {
        let t0 = Instant::now();
        // The grandchild keeps stdout open after the child exits; the group kill ends it.
        let f = run(
            "forker",
            Command::new("sh").args(["-c", "sleep 30 & echo parent-done"]),
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(f.stdout.starts_with("parent-done"), "{f:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }
}
