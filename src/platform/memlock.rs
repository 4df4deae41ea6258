//! The locked-memory limit that VFIO's DMA mappings count against.
//!
//! VFIO's type1 IOMMU pins every page it maps for a device and charges it to the process's
//! locked memory (drivers/vfio/vfio_iommu_type1.c `vfio_lock_acct`, the `locked_vm` that
//! /proc/self/status shows as VmLck), refusing with ENOMEM once RLIMIT_MEMLOCK would be passed
//! ("RLIMIT_MEMLOCK (N) exceeded" in the kernel log) unless the process has CAP_IPC_LOCK (root
//! has it). A driver run by a service account meets that limit first: the default is 8 MiB
//! (Linux 5.16 and later; 64 KiB before), and one port's pool of 2 KiB buffers is 8 MiB by
//! itself. So a refused mapping is told apart here (the limit, what is locked, whether the
//! process is exempt) and the error says how much to allow and where.
//!
//! Everything is read from /proc, as `prlimit` and `grep VmLck` would show it.

/// CAP_IPC_LOCK's bit in the capability sets (include/uapi/linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;

/// The soft RLIMIT_MEMLOCK in bytes from the text of /proc/self/limits; `None` when
/// unlimited or not found.
pub fn parse_limit(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    line["Max locked memory".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Locked memory in bytes (VmLck) from the text of /proc/self/status.
pub fn parse_locked(status: &str) -> u64 {
    field(status, "VmLck:")
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Whether the effective capabilities in the text of /proc/self/status hold CAP_IPC_LOCK.
pub fn parse_exempt(status: &str) -> bool {
    field(status, "CapEff:")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & 1 << CAP_IPC_LOCK != 0)
}

fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find_map(|l| l.strip_prefix(name))
}

/// This process's soft RLIMIT_MEMLOCK in bytes (`None`: unlimited, or unknown).
pub fn limit() -> Option<u64> {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .as_deref()
        .and_then(parse_limit)
}

/// The memory this process has locked now, VFIO's pinned DMA memory included.
pub fn locked() -> u64 {
    std::fs::read_to_string("/proc/self/status").map_or(0, |s| parse_locked(&s))
}

/// Whether the limit does not apply to this process (CAP_IPC_LOCK).
pub fn exempt() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| parse_exempt(&s))
}

/// When mapping `bytes` more is refused for want of memory: the limit, what is locked and
/// what the limit must be at least, if the limit is what refused it (not exempt, and
/// `locked + bytes` passes it).
pub fn refusal(bytes: u64) -> Option<(u64, u64, u64)> {
    let limit = limit()?;
    let locked = locked();
    (!exempt() && locked + bytes > limit).then_some((limit, locked, locked + bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proc_files_are_read_as_prlimit_shows_them() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 4096                 files     \n\
                      Max locked memory         65536                65536                bytes     \n";
        assert_eq!(parse_limit(limits), Some(65536));
        let unlimited =
            "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(parse_limit(unlimited), None);
        let status = "Name:\tvfio-nic\nVmLck:\t    2048 kB\nCapEff:\t0000000000004000\n";
        assert_eq!(parse_locked(status), 2 << 20);
        assert!(parse_exempt(status));
        assert!(!parse_exempt("CapEff:\t0000000000000000\n"));
        assert_eq!(parse_locked("Name:\tx\n"), 0);
    }

    #[test]
    fn this_process_can_be_read() {
        // Whatever the limits of the machine running the tests, reading them does not fail.
        let _ = (limit(), locked(), exempt());
    }
}
