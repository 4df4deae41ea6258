//! The tool without root, as a service account runs it: a user who owns the device's
//! `/dev/vfio/N` (and nothing else) opens and drives the port; with a locked-memory limit too
//! low for the port's pools the error names the limit needed and how to set it, and that limit
//! is enough; without huge pages the driver falls back to 4 KiB pages and says so.
//!
//! The tests change ownership of the group node and the huge-page reserve, and put both back
//! when they end (also on failure). They run the `vfio-nic` binary as uid/gid 1000, with the
//! locked-memory limit set in this test's own process first (a child inherits it; raising it
//! needs root, which this process still is).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use nix::sys::resource::{setrlimit, Resource};

use super::fault::{fail, outcome, tool, OrFail, Res};
use super::proc;
use super::{step, Ctx, Outcome};

/// The unprivileged user and group the tool runs as (owns nothing else on the test bed).
const USER: u32 = 1000;
/// How long one run of the tool may take.
const RUN_LIMIT: Duration = Duration::from_secs(45);
/// A locked-memory limit that fits a port's pools with room to spare.
const ENOUGH: u64 = 512 << 20;

/// The port's IOMMU group node, `/dev/vfio/N`.
fn group_node(ctx: &Ctx) -> Res<PathBuf> {
    let addr = ctx.ports[0];
    let link = std::fs::read_link(format!("/sys/bus/pci/devices/{addr}/iommu_group")).or_fail()?;
    let n = link
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Outcome::Fail(format!("{addr}: no IOMMU group")))?;
    Ok(PathBuf::from(format!("/dev/vfio/{n}")))
}

/// The group node owned by [`USER`] until dropped (then root's again).
struct Owned(PathBuf);

impl Owned {
    fn give(node: PathBuf) -> Res<Owned> {
        step(format!("giving {} to uid {USER}", node.display()));
        std::os::unix::fs::chown(&node, Some(USER), Some(USER)).or_fail()?;
        Ok(Owned(node))
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = std::os::unix::fs::chown(&self.0, Some(0), Some(0));
    }
}

/// Runs `vfio-nic ARGS` as [`USER`] with a locked-memory limit of `memlock` bytes.
fn as_user(bin: &str, args: &[&str], memlock: u64) -> Res<proc::Finished> {
    setrlimit(Resource::RLIMIT_MEMLOCK, memlock, memlock).or_fail()?;
    step(format!(
        "running `vfio-nic {}` as uid {USER} with RLIMIT_MEMLOCK {memlock} bytes",
        args.join(" ")
    ));
    proc::Bounded::spawn(
        format!("`vfio-nic {}` as uid {USER}", args.join(" ")),
        Command::new(bin).args(args).uid(USER).gid(USER),
    )
    .or_fail()?
    .finish_within(RUN_LIMIT)
    .or_fail()
}

/// Without ownership of the group the tool says what to do; with it, it runs.
pub fn unprivileged_tool_runs(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let bin = tool()?;
        let port = ctx.ports[0].to_string();
        let node = group_node(ctx)?;
        let refused = as_user(&bin, &["--json", "info", &port], ENOUGH)?;
        let why = refused.stderr.trim().to_string();
        if refused.success() || !why.contains("chown") {
            return fail(format!(
                "without owning {} the tool must refuse and say how to give access; it said: {}",
                node.display(),
                refused.text()
            ));
        }
        let _owned = Owned::give(node.clone())?;
        let out = as_user(&bin, &["--json", "info", &port], ENOUGH)?;
        if !out.success() {
            return fail(format!(
                "as uid {USER} owning {}: {}",
                node.display(),
                out.text()
            ));
        }
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).or_fail()?;
        Ok(format!(
            "refused before: `{why}`; owning {} it opened the port ({} MAC {}, link up {})",
            node.display(),
            v["driver"],
            v["mac"],
            v["link"]["up"]
        ))
    })
}

/// `ulimit -l N` from an error message: N in KiB.
fn ulimit_kib(msg: &str) -> Option<u64> {
    let at = msg.find("ulimit -l ")? + "ulimit -l ".len();
    msg[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A locked-memory limit below what the port's pools pin: the error names the limit needed
/// and the ways to set it, and running again with exactly that limit works.
pub fn unprivileged_memlock_limit_named(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let bin = tool()?;
        let port = ctx.ports[0].to_string();
        let _owned = Owned::give(group_node(ctx)?)?;
        let low = 1 << 20;
        let out = as_user(&bin, &["info", &port], low)?;
        // The tool's one-line error (log lines above it are left out).
        let msg = out
            .stderr
            .lines()
            .find(|l| l.starts_with("vfio-nic: "))
            .unwrap_or(out.stderr.trim())
            .to_string();
        if out.success() {
            return fail(format!(
                "with RLIMIT_MEMLOCK {low} bytes the port opened; it needs more than that (its pool alone is 8 MiB)"
            ));
        }
        for needle in ["ulimit -l ", "LimitMEMLOCK=", "locked-memory limit"] {
            if !msg.contains(needle) {
                return fail(format!("the error does not say `{needle}`: {msg}"));
            }
        }
        let kib =
            ulimit_kib(&msg).ok_or_else(|| Outcome::Fail(format!("no `ulimit -l N` in: {msg}")))?;
        if kib * 1024 <= low {
            return fail(format!(
                "the limit named ({kib} KiB) is not above the one that failed: {msg}"
            ));
        }
        let again = as_user(&bin, &["info", &port], kib * 1024)?;
        if !again.success() {
            return fail(format!(
                "with the limit the error named ({kib} KiB) the port still does not open: {}",
                again.text()
            ));
        }
        Ok(format!(
            "with {} KiB: `{msg}`; with the {kib} KiB it named, the port opened",
            low >> 10
        ))
    })
}

/// The huge-page reserve set to `n` until dropped (then what it was).
struct HugePages(String);

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

impl HugePages {
    fn set(n: u32) -> Res<HugePages> {
        let was = std::fs::read_to_string(NR_HUGEPAGES).or_fail()?;
        std::fs::write(NR_HUGEPAGES, n.to_string()).or_fail()?;
        Ok(HugePages(was.trim().to_string()))
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(NR_HUGEPAGES, &self.0);
    }
}

/// No huge pages reserved: the port still opens, on 4 KiB pages, and the tool says so.
pub fn unprivileged_without_huge_pages(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let bin = tool()?;
        let port = ctx.ports[0].to_string();
        let _owned = Owned::give(group_node(ctx)?)?;
        let _none = HugePages::set(0)?;
        let out = as_user(&bin, &["info", &port], ENOUGH)?;
        if !out.success() {
            return fail(format!("without huge pages: {}", out.text()));
        }
        let warning = out
            .stderr
            .lines()
            .find(|l| l.contains("no 2 MiB huge pages available, using 4 KiB pages"))
            .ok_or_else(|| {
                Outcome::Fail(format!(
                    "no warning about the 4 KiB fallback on stderr: {}",
                    out.stderr.trim()
                ))
            })?;
        let shown = warning.find("no 2 MiB").map_or(warning, |i| &warning[i..]);
        Ok(format!(
            "port opened on 4 KiB pages; warned: `{}`",
            shown.trim()
        ))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_limit_is_read_from_the_message() {
        let m = "... raise the limit to at least 12800000 bytes (12500 KiB): `ulimit -l 12500` in the shell ...";
        assert_eq!(super::ulimit_kib(m), Some(12500));
        assert_eq!(super::ulimit_kib("nothing"), None);
    }
}
