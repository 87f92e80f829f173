//! Facts about the host for the CPU device: its description and memory, read the way upstream's
//! CPU backend reads them (`ggml-cpu.cpp`), and the page size (`sysconf`, the one `unsafe`
//! call here).

/// The first `model name` line of /proc/cpuinfo (trimmed), or "CPU" when there is none, as
/// upstream's CPU device describes itself on Linux.
pub(crate) fn cpu_description() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| model_name(&text))
        .unwrap_or_else(|| "CPU".to_string())
}

fn model_name(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, value)| value.trim().to_string())
        .filter(|value| !value.is_empty())
}

/// The OS page size (`sysconf(_SC_PAGESIZE)`, read once); 4096 if sysconf gives no usable
/// answer.
pub fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf reads a configuration value; it takes no pointers and touches no
        // memory of ours.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(n)
            .ok()
            .filter(|n| n.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// Total physical memory in bytes (`MemTotal` of /proc/meminfo, which is what
/// `sysconf(_SC_PHYS_PAGES) * page size` reports), or 0 when it cannot be read.
pub(crate) fn total_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total(&text))
        .unwrap_or(0)
}

fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    let unit = match fields.next() {
        Some(u) if u.eq_ignore_ascii_case("kb") => 1024,
        None => 1,
        Some(_) => return None,
    };
    value.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpuinfo_and_meminfo() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: X\nmodel name\t:  Example CPU @ 3GHz \n";
        assert_eq!(model_name(cpuinfo).as_deref(), Some("Example CPU @ 3GHz"));
        assert_eq!(model_name("processor : 0\n"), None);
        assert_eq!(
            mem_total("MemTotal:       16318216 kB\nMemFree: 1 kB\n"),
            Some(16318216 * 1024)
        );
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }
}
