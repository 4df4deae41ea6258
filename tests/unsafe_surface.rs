//! The crate's `unsafe` surface is what src/platform/mod.rs says it is: the compiler refuses
//! `unsafe` everywhere (`#![deny(unsafe_code)]` in src/lib.rs) except in `platform::barrier`,
//! `platform::dma`, `platform::mmio`, `platform::packet` and `platform::vfio`, and nothing
//! re-allows it elsewhere. This test reads the sources, so that a new `#[allow(unsafe_code)]` or a dropped
//! `deny` is noticed in review rather than by accident.

use std::path::{Path, PathBuf};

const ALLOWED: &[&str] = &[
    "src/platform/barrier.rs",
    "src/platform/dma/",
    "src/platform/mmio.rs",
    "src/platform/packet.rs",
    "src/platform/vfio/",
];
/// The one file that may say `#[allow(unsafe_code)]`, once before each allowed module.
const ALLOW_LIST: &str = "src/platform/mod.rs";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn unsafe_code_is_denied_outside_the_five_platform_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    assert!(
        lib.contains("\n#![deny(unsafe_code)]\n"),
        "src/lib.rs lost #![deny(unsafe_code)]"
    );
    let platform = std::fs::read_to_string(root.join(ALLOW_LIST)).unwrap();
    let allowed: Vec<&str> = platform
        .lines()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0].trim() == "#[allow(unsafe_code)]")
        .map(|w| w[1].trim())
        .collect();
    assert_eq!(
        allowed,
        [
            "pub mod barrier;",
            "pub mod dma;",
            "pub mod mmio;",
            "pub mod packet;",
            "pub mod vfio;"
        ]
    );

    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("hwtests"), &mut files);
    let mut offenders = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if ALLOWED.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("allow(unsafe_code)") && rel != ALLOW_LIST
                || code.contains("unsafe {")
                || code.contains("unsafe fn")
                || code.contains("unsafe impl")
            {
                offenders.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "unsafe outside dma/mmio/vfio:\n{}",
        offenders.join("\n")
    );
}
