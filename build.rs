//! Build script: turns the register maps in `regs/*.toml` into Rust code.
//!
//! For every `regs/<family>.toml` it validates the map (see [`validate`]) and
//! writes `$OUT_DIR/regs_<family>.rs`, which `src/regs/mod.rs` includes inside
//! `pub mod <family>`. The format is described in `regs/README.md`.
//!
//! Any inconsistency in a map is a build error (a panic with a message that
//! names the file, the register and the field), so a typo in an offset or an
//! overlapping bit range never reaches a driver.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Access kinds accepted in the `access` key, and the `Access` variant each maps to.
const ACCESS_KINDS: &[(&str, &str)] = &[
    ("rw", "ReadWrite"),
    ("ro", "ReadOnly"),
    ("wo", "WriteOnly"),
    ("rc", "ReadClear"),
    ("rw1c", "WriteOneClear"),
    ("rwsc", "SelfClearing"),
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    family: String,
    #[serde(default)]
    chip: String,
    #[serde(default)]
    sources: Vec<String>,
    #[serde(rename = "register", default)]
    registers: Vec<RegisterDef>,
    /// The statistics the port reports, in order: see [`generate_stats`].
    #[serde(default)]
    stats: Option<StatsDef>,
    /// Management-complex commands (queue-manager devices): see [`generate_commands`].
    #[serde(rename = "command", default)]
    commands: Vec<CommandDef>,
}

/// One management-complex command: its id before the version, the version sent, and its
/// parameter fields as (64-bit parameter word 0..6, bits).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandDef {
    name: String,
    id: u16,
    version: u8,
    description: String,
    #[serde(default)]
    params: Vec<ParamDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamDef {
    name: String,
    word: u8,
    lo: u8,
    hi: u8,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatsDef {
    /// Counter names: a read-to-clear register; `X` for the 36-bit pair `XL`/`XH`; an array
    /// name for the sum of its elements.
    counters: Vec<String>,
    /// The per-queue drop counter array, one element per receive queue (at most 16 reported).
    queue_drops: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterDef {
    name: String,
    offset: u32,
    /// Access width in bits: 8, 16 or 32 (the default).
    #[serde(default)]
    width: Option<u32>,
    #[serde(default)]
    stride: Option<u32>,
    #[serde(default)]
    count: Option<u32>,
    access: String,
    description: String,
    #[serde(default)]
    ranges: Vec<RangeDef>,
    #[serde(default)]
    aliases: Vec<AliasDef>,
    #[serde(default)]
    fields: Vec<FieldDef>,
    #[serde(default)]
    fields_like: Option<String>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RangeDef {
    from: u32,
    offset: u32,
    #[serde(default)]
    stride: Option<u32>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct AliasDef {
    offset: u32,
    #[serde(default)]
    stride: Option<u32>,
    count: u32,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct FieldDef {
    name: String,
    #[serde(default)]
    bit: Option<u32>,
    #[serde(default)]
    lo: Option<u32>,
    #[serde(default)]
    hi: Option<u32>,
    description: String,
    #[serde(default)]
    values: BTreeMap<String, String>,
}

/// A register after validation, with every number resolved.
struct Register {
    name: String,
    offset: u32,
    /// Access width in bits (8, 16 or 32).
    width: u32,
    /// 0 for a single register.
    stride: u32,
    /// 1 for a single register.
    count: u32,
    is_array: bool,
    access_variant: &'static str,
    description: String,
    /// (from, offset, stride), extra ranges only.
    ranges: Vec<(u32, u32, u32)>,
    /// (offset, stride, count).
    aliases: Vec<(u32, u32, u32)>,
    fields: Vec<Field>,
}

#[derive(Clone)]
struct Field {
    name: String,
    ident: String,
    lo: u32,
    hi: u32,
    description: String,
    values: Vec<(u32, String)>,
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let regs_dir = manifest.join("regs");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={}", regs_dir.display());

    let mut files: Vec<PathBuf> = std::fs::read_dir(&regs_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", regs_dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    if files.is_empty() {
        panic!("no register maps found in {}", regs_dir.display());
    }
    let mut families = Vec::new();
    for path in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let (family, code) = process(path);
        if families.contains(&family) {
            panic!(
                "{}: family `{family}` is defined by more than one file",
                path.display()
            );
        }
        let out = out_dir.join(format!("regs_{family}.rs"));
        std::fs::write(&out, code)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
        families.push(family);
    }
}

fn process(path: &Path) -> (String, String) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let map: MapFile = toml::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: invalid register map: {e}", path.display()));
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if map.family != stem {
        panic!(
            "{}: `family = \"{}\"` must match the file name `{stem}`",
            path.display(),
            map.family
        );
    }
    if !is_ident_like(&map.family) || map.family.chars().any(|c| c.is_ascii_uppercase()) {
        panic!(
            "{}: family name `{}` must be a lower-case identifier",
            path.display(),
            map.family
        );
    }
    let registers = validate(path, &map);
    let mut code = generate(&map, &registers);
    if let Some(stats) = &map.stats {
        code.push_str(&generate_stats(path, stats, &registers));
    }
    if !map.commands.is_empty() {
        code.push_str(&generate_commands(path, &map.commands));
    }
    (map.family.clone(), code)
}

fn is_ident_like(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Turns a datasheet field name into a Rust constant name: upper-case, every
/// character outside `[A-Za-z0-9_]` becomes `_`, and a name that starts with a
/// digit gets a leading `_` (`10G_PMA_PMD` -> `_10G_PMA_PMD`).
fn field_ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

/// Module name for a register's fields: the register name in lower case, with
/// `_` appended if that collides with a Rust keyword.
fn module_ident(name: &str) -> String {
    let s = name.to_ascii_lowercase();
    if KEYWORDS.contains(&s.as_str()) {
        format!("{s}_")
    } else {
        s
    }
}

fn parse_value_key(key: &str) -> Option<u32> {
    let k = key.trim();
    if let Some(h) = k.strip_prefix("0x").or_else(|| k.strip_prefix("0X")) {
        u32::from_str_radix(h, 16).ok()
    } else if let Some(b) = k.strip_prefix("0b") {
        u32::from_str_radix(b, 2).ok()
    } else {
        k.parse().ok()
    }
}

fn resolve_fields(path: &Path, reg: &str, reg_width: u32, defs: &[FieldDef]) -> Vec<Field> {
    let ctx = |f: &str| format!("{}: register {reg}, field {f}", path.display());
    let mut fields: Vec<Field> = Vec::new();
    for f in defs {
        if f.name.trim().is_empty() {
            panic!(
                "{}: register {reg}: a field has an empty name",
                path.display()
            );
        }
        let (lo, hi) = match (f.bit, f.lo, f.hi) {
            (Some(b), None, None) => (b, b),
            (None, Some(lo), Some(hi)) => (lo, hi),
            (None, Some(lo), None) => (lo, lo),
            _ => panic!(
                "{}: give either `bit = n` or `lo = a, hi = b`",
                ctx(&f.name)
            ),
        };
        if lo > hi {
            panic!("{}: lo ({lo}) > hi ({hi})", ctx(&f.name));
        }
        if hi >= reg_width {
            panic!(
                "{}: bits {hi}..{lo} do not fit in a {reg_width}-bit register",
                ctx(&f.name)
            );
        }
        if f.description.trim().is_empty() {
            panic!("{}: empty description", ctx(&f.name));
        }
        let width = hi - lo + 1;
        let max = if width >= 32 {
            u32::MAX
        } else {
            (1u32 << width) - 1
        };
        let mut values = Vec::new();
        for (k, meaning) in &f.values {
            let v = parse_value_key(k)
                .unwrap_or_else(|| panic!("{}: value key `{k}` is not a number", ctx(&f.name)));
            if v > max {
                panic!("{}: value {v} does not fit in {width} bit(s)", ctx(&f.name));
            }
            if values.iter().any(|(x, _)| *x == v) {
                panic!("{}: value {v} listed twice", ctx(&f.name));
            }
            values.push((v, meaning.clone()));
        }
        values.sort_by_key(|(v, _)| *v);
        let ident = field_ident(&f.name);
        for other in &fields {
            if other.name.eq_ignore_ascii_case(&f.name) || other.ident == ident {
                panic!(
                    "{}: duplicate field name (clashes with {})",
                    ctx(&f.name),
                    other.name
                );
            }
            if lo <= other.hi && other.lo <= hi {
                panic!(
                    "{}: bits {hi}..{lo} overlap field {} (bits {}..{})",
                    ctx(&f.name),
                    other.name,
                    other.hi,
                    other.lo
                );
            }
        }
        fields.push(Field {
            name: f.name.clone(),
            ident,
            lo,
            hi,
            description: f.description.clone(),
            values,
        });
    }
    fields.sort_by_key(|f| f.lo);
    fields
}

/// Checks one map and resolves it. Panics (failing the build) when:
/// a name is empty, not identifier-like or duplicated (case-insensitively);
/// the access kind is unknown; an offset is not 4-byte aligned; an array has
/// no stride or a zero count, or a single register has a stride/ranges/aliases;
/// a range or alias is malformed; a field has lo > hi, does not fit in 32 bits,
/// overlaps another field of the same register, or repeats a name; a named value
/// does not fit its field; `fields_like` names a missing register; or two
/// registers (counting every array instance, extra range and alias) share an offset.
fn validate(path: &Path, map: &MapFile) -> Vec<Register> {
    let p = path.display();
    // Names first, so `fields_like` can refer to any register.
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (i, r) in map.registers.iter().enumerate() {
        if !is_ident_like(&r.name) {
            panic!(
                "{p}: register name `{}` must start with a letter and contain only [A-Za-z0-9_]",
                r.name
            );
        }
        if let Some(j) = by_name.insert(r.name.to_ascii_uppercase(), i) {
            panic!(
                "{p}: register name `{}` is defined twice (entries {j} and {i})",
                r.name
            );
        }
    }
    let mut out = Vec::new();
    for r in &map.registers {
        let name = &r.name;
        if r.description.trim().is_empty() {
            panic!("{p}: register {name}: empty description");
        }
        let access_variant = ACCESS_KINDS
            .iter()
            .find(|(k, _)| *k == r.access)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| {
                let kinds: Vec<&str> = ACCESS_KINDS.iter().map(|(k, _)| *k).collect();
                panic!(
                    "{p}: register {name}: unknown access `{}` (expected one of {kinds:?})",
                    r.access
                )
            });
        let width = r.width.unwrap_or(32);
        if !matches!(width, 8 | 16 | 32) {
            panic!("{p}: register {name}: width {width} must be 8, 16 or 32");
        }
        if r.offset % (width / 8) != 0 {
            panic!(
                "{p}: register {name}: offset {:#x} is not {}-byte aligned (its width)",
                r.offset,
                width / 8
            );
        }
        let is_array = r.count.is_some();
        if is_array && width != 32 {
            panic!("{p}: register {name}: arrays are 32 bits wide (no `width` with `count`)");
        }
        let (stride, count) = match (r.stride, r.count) {
            (None, None) => (0, 1),
            (Some(s), Some(c)) => {
                if c == 0 {
                    panic!("{p}: register {name}: count must be at least 1");
                }
                if s == 0 || s % 4 != 0 {
                    panic!("{p}: register {name}: stride {s:#x} must be a non-zero multiple of 4");
                }
                (s, c)
            }
            (None, Some(_)) => panic!("{p}: register {name}: `count` needs a `stride`"),
            (Some(_), None) => panic!("{p}: register {name}: `stride` needs a `count`"),
        };
        if !is_array && (!r.ranges.is_empty() || !r.aliases.is_empty()) {
            panic!("{p}: register {name}: `ranges`/`aliases` are only allowed on arrays (with stride and count)");
        }
        let mut ranges = Vec::new();
        let mut last_from = 0;
        for rg in &r.ranges {
            let s = rg.stride.unwrap_or(stride);
            if rg.from <= last_from || rg.from >= count {
                panic!(
                    "{p}: register {name}: range `from = {}` must be increasing, > 0 and < count ({count})",
                    rg.from
                );
            }
            if rg.offset % 4 != 0 || s == 0 || s % 4 != 0 {
                panic!(
                    "{p}: register {name}: range from {} has a misaligned offset or stride",
                    rg.from
                );
            }
            last_from = rg.from;
            ranges.push((rg.from, rg.offset, s));
        }
        let mut aliases = Vec::new();
        for a in &r.aliases {
            let s = a.stride.unwrap_or(stride);
            if a.count == 0 || a.count > count {
                panic!(
                    "{p}: register {name}: alias at {:#x} has count {} (must be 1..={count})",
                    a.offset, a.count
                );
            }
            if a.offset % 4 != 0 || s == 0 || s % 4 != 0 {
                panic!(
                    "{p}: register {name}: alias at {:#x} has a misaligned offset or stride",
                    a.offset
                );
            }
            aliases.push((a.offset, s, a.count));
        }
        let fields = match &r.fields_like {
            Some(other) => {
                if !r.fields.is_empty() {
                    panic!("{p}: register {name}: give either `fields` or `fields_like`, not both");
                }
                let j = *by_name.get(&other.to_ascii_uppercase()).unwrap_or_else(|| {
                    panic!("{p}: register {name}: `fields_like = \"{other}\"` names no register")
                });
                let src = &map.registers[j];
                if src.fields_like.is_some() {
                    panic!("{p}: register {name}: `fields_like` must name a register with its own fields");
                }
                resolve_fields(path, other, width, &src.fields)
            }
            None => resolve_fields(path, name, width, &r.fields),
        };
        out.push(Register {
            name: name.clone(),
            offset: r.offset,
            width,
            stride,
            count,
            is_array,
            access_variant,
            description: r.description.clone(),
            ranges,
            aliases,
            fields,
        });
    }
    // Every byte of every address, instance and alias: no two registers may share one.
    let mut seen: HashMap<u64, (String, u32, &'static str)> = HashMap::new();
    for reg in &out {
        let mut claim = |addr: u64, n: u32, what: &'static str| {
            if addr > u64::from(u32::MAX) {
                panic!(
                    "{p}: register {}[{n}] lies beyond the 32-bit address space",
                    reg.name
                );
            }
            for byte in addr..addr + u64::from(reg.width / 8) {
                if let Some((other, m, w)) = seen.insert(byte, (reg.name.clone(), n, what)) {
                    panic!(
                        "{p}: byte {byte:#x} is used twice: {}[{n}] ({what}) and {other}[{m}] ({w})",
                        reg.name
                    );
                }
            }
        };
        for n in 0..reg.count {
            claim(u64::from(instance_offset(reg, n)), n, "primary");
        }
        for &(off, s, c) in &reg.aliases {
            for n in 0..c {
                claim(u64::from(off) + u64::from(n) * u64::from(s), n, "alias");
            }
        }
    }
    out
}

fn instance_offset(reg: &Register, n: u32) -> u32 {
    let (mut from, mut base, mut stride) = (0, reg.offset, reg.stride);
    for &(f, o, s) in &reg.ranges {
        if n >= f {
            (from, base, stride) = (f, o, s);
        }
    }
    let addr = u64::from(base) + u64::from(n - from) * u64::from(stride);
    u32::try_from(addr).unwrap_or_else(|_| panic!("register {}[{n}] lies beyond 4 GiB", reg.name))
}

fn lit(s: &str) -> String {
    format!("{s:?}")
}

/// Text for a `#[doc]` attribute: brackets and angle brackets from
/// the datasheet text (`RDT[n]`, `n < 16`) are escaped so rustdoc does not read
/// them as links or HTML.
fn doc_escape(s: &str) -> String {
    s.replace('[', "\\[")
        .replace(']', "\\]")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn generate(map: &MapFile, regs: &[Register]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "// @generated by build.rs from regs/{}.toml - do not edit.",
        map.family
    );
    let _ = writeln!(o, "// Chip: {}", map.chip);
    for s in &map.sources {
        let _ = writeln!(o, "// Source: {s}");
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "/// Family name, as accepted by [`super::family`].");
    let _ = writeln!(o, "pub const FAMILY: &str = {};", lit(&map.family));
    let _ = writeln!(o, "/// Chip this map describes.");
    let _ = writeln!(o, "pub const CHIP: &str = {};", lit(&map.chip));
    let _ = writeln!(o);

    for r in regs {
        let doc = format!(
            "{}{}",
            doc_escape(&format!(
                "`{}` ({}) - {}",
                r.name,
                addr_summary(r),
                r.description
            )),
            if r.fields.is_empty() {
                String::new()
            } else {
                format!(" Fields: [`mod@{}`].", module_ident(&r.name))
            }
        );
        let _ = writeln!(o, "#[doc = {}]", lit(&doc));
        if r.is_array {
            let _ = writeln!(
                o,
                "pub const {}: super::RegArray = super::RegArray {{ base: {:#07x}, stride: {:#x}, count: {}, ranges: &[{}] }};",
                r.name,
                r.offset,
                r.stride,
                r.count,
                r.ranges
                    .iter()
                    .map(|(f, off, s)| format!("super::RegRange {{ from: {f}, offset: {off:#07x}, stride: {s:#x} }}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        } else {
            // A register narrower than 32 bits has a type of its width, so that it can only be
            // accessed at that width (virtio's rule, 4.1.3.1).
            let ty = match r.width {
                8 => "Reg8",
                16 => "Reg16",
                _ => "Reg",
            };
            let _ = writeln!(
                o,
                "pub const {}: super::{ty} = super::{ty}({:#07x});",
                r.name, r.offset
            );
        }
        if !r.fields.is_empty() {
            let _ = writeln!(
                o,
                "#[doc = {}]",
                lit(&format!("Bit fields of `{}`.", r.name))
            );
            let _ = writeln!(o, "pub mod {} {{", module_ident(&r.name));
            let _ = writeln!(o, "    use super::super::Field;");
            for f in &r.fields {
                let bits = if f.lo == f.hi {
                    format!("bit {}", f.lo)
                } else {
                    format!("bits {}:{}", f.hi, f.lo)
                };
                let mut doc = format!("`{}` ({bits}) - {}", f.name, f.description);
                if !f.values.is_empty() {
                    let vals: Vec<String> =
                        f.values.iter().map(|(v, m)| format!("{v} = {m}")).collect();
                    let _ = write!(doc, " Values: {}.", vals.join(", "));
                }
                let _ = writeln!(o, "    #[doc = {}]", lit(&doc_escape(&doc)));
                let _ = writeln!(
                    o,
                    "    pub const {}: Field = Field {{ lo: {}, width: {} }};",
                    f.ident,
                    f.lo,
                    f.hi - f.lo + 1
                );
            }
            let _ = writeln!(o, "}}");
        }
        let _ = writeln!(o);
    }

    let _ = writeln!(
        o,
        "/// Every register of this family, for lookup and decoding at run time."
    );
    let _ = writeln!(
        o,
        "pub static MAP: super::RegisterMap = super::RegisterMap {{"
    );
    let _ = writeln!(o, "    family: {},", lit(&map.family));
    let _ = writeln!(o, "    registers: &[");
    for r in regs {
        let _ = writeln!(o, "        super::RegisterInfo {{");
        let _ = writeln!(o, "            name: {},", lit(&r.name));
        let _ = writeln!(o, "            offset: {:#07x},", r.offset);
        let _ = writeln!(o, "            width: {},", r.width);
        let _ = writeln!(o, "            stride: {:#x},", r.stride);
        let _ = writeln!(o, "            count: {},", r.count);
        let _ = writeln!(o, "            is_array: {},", r.is_array);
        let _ = writeln!(
            o,
            "            access: super::Access::{},",
            r.access_variant
        );
        let _ = writeln!(o, "            description: {},", lit(&r.description));
        let _ = writeln!(
            o,
            "            ranges: &[{}],",
            r.ranges
                .iter()
                .map(|(f, off, s)| format!(
                    "super::RegRange {{ from: {f}, offset: {off:#07x}, stride: {s:#x} }}"
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            o,
            "            aliases: &[{}],",
            r.aliases
                .iter()
                .map(|(off, s, c)| format!(
                    "super::RegAlias {{ offset: {off:#07x}, stride: {s:#x}, count: {c} }}"
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(o, "            fields: &[");
        for f in &r.fields {
            let vals: Vec<String> = f
                .values
                .iter()
                .map(|(v, m)| format!("({v}, {})", lit(m)))
                .collect();
            let _ = writeln!(
                o,
                "                super::FieldInfo {{ name: {}, lo: {}, hi: {}, description: {}, values: &[{}] }},",
                lit(&f.name),
                f.lo,
                f.hi,
                lit(&f.description),
                vals.join(", ")
            );
        }
        let _ = writeln!(o, "            ],");
        let _ = writeln!(o, "        }},");
    }
    let _ = writeln!(o, "    ],");
    let _ = writeln!(o, "}};");
    o
}

/// The `[stats]` table as `STATS`: every name must be a read-to-clear register, a pair of them
/// (`GORC` for `GORCL` and `GORCH`), or a read-to-clear array (summed); the queue drop counters
/// an array of them.
fn generate_stats(path: &Path, stats: &StatsDef, regs: &[Register]) -> String {
    let find = |name: &str| regs.iter().find(|r| r.name == name);
    fn counter<'r>(path: &Path, r: &'r Register) -> &'r Register {
        if r.access_variant != "ReadClear" {
            panic!(
                "{}: [stats] names `{}`, which is not a read-to-clear (rc) register",
                path.display(),
                r.name
            );
        }
        r
    }
    let mut o = String::new();
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "/// The statistics the port reports, in order, from `[stats]` of the map."
    );
    let _ = writeln!(o, "pub static STATS: super::Stats = super::Stats {{");
    let _ = writeln!(o, "    counters: &[");
    for name in &stats.counters {
        let src = match find(name) {
            Some(r) if r.is_array => format!("Sum({})", counter(path, r).name),
            Some(r) => format!("One({})", counter(path, r).name),
            None => match (find(&format!("{name}L")), find(&format!("{name}H"))) {
                (Some(l), Some(h)) if !l.is_array && !h.is_array => {
                    format!("Wide({}, {})", counter(path, l).name, counter(path, h).name)
                }
                _ => panic!(
                    "{}: [stats] counter `{name}` is neither a register nor an L/H pair",
                    path.display()
                ),
            },
        };
        let _ = writeln!(o, "        ({}, super::Counter::{src}),", lit(name));
    }
    let _ = writeln!(o, "    ],");
    let drops = match find(&stats.queue_drops) {
        Some(r) if r.is_array => counter(path, r),
        _ => panic!(
            "{}: [stats] queue_drops `{}` is not a register array",
            path.display(),
            stats.queue_drops
        ),
    };
    let names: Vec<String> = (0..drops.count.min(16))
        .map(|q| lit(&format!("{}{q}", drops.name)))
        .collect();
    let _ = writeln!(o, "    queue_drops: {},", drops.name);
    let _ = writeln!(o, "    queue_drop_names: &[{}],", names.join(", "));
    let _ = writeln!(o, "}};");
    o
}

fn addr_summary(r: &Register) -> String {
    if !r.is_array {
        return format!("{:#07x}", r.offset);
    }
    let mut parts = Vec::new();
    let mut starts: Vec<(u32, u32, u32)> = vec![(0, r.offset, r.stride)];
    starts.extend(r.ranges.iter().copied());
    for (i, &(from, off, s)) in starts.iter().enumerate() {
        let to = starts.get(i + 1).map_or(r.count, |x| x.0) - 1;
        let n = if from == 0 {
            "n".to_string()
        } else {
            format!("(n-{from})")
        };
        parts.push(format!("n={from}..={to}: {off:#07x} + {s:#x}*{n}"));
    }
    for &(off, s, c) in &r.aliases {
        parts.push(format!("alias n=0..={}: {off:#07x} + {s:#x}*n", c - 1));
    }
    parts.join("; ")
}

/// The `[[command]]` tables as `pub mod cmd`: a `McCommand` per command, a module per command
/// with an `McParam` per parameter field, and `COMMANDS` listing them all. Checked: names are
/// identifiers and unique, the id fits 12 bits and the version 4, every field lies in one of
/// the 7 parameter words with `lo <= hi < 64`, and no two fields of a command overlap.
fn generate_commands(path: &Path, cmds: &[CommandDef]) -> String {
    let bad = |what: String| -> ! { panic!("{}: {what}", path.display()) };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "/// Management-complex commands, from `[[command]]` of the map."
    );
    let _ = writeln!(o, "pub mod cmd {{");
    let _ = writeln!(o, "    use crate::platform::regs::{{McCommand, McParam}};");
    let mut names = Vec::new();
    for c in cmds {
        if !is_ident_like(&c.name) || names.contains(&c.name) {
            bad(format!(
                "command name `{}` is not an identifier or is repeated",
                c.name
            ));
        }
        names.push(c.name.clone());
        if c.id > 0xfff || c.version > 0xf {
            bad(format!(
                "command `{}`: id {:#x} must fit 12 bits and version {} 4 bits",
                c.name, c.id, c.version
            ));
        }
        let _ = writeln!(
            o,
            "    /// `{}` ({:#05x} v{}) - {}",
            c.name,
            c.id,
            c.version,
            doc_escape(&c.description)
        );
        let _ = writeln!(
            o,
            "    pub const {}: McCommand = McCommand {{ name: {}, id: {:#05x}, version: {} }};",
            c.name,
            lit(&c.name),
            c.id,
            c.version
        );
        if c.params.is_empty() {
            continue;
        }
        let mut used = [0u64; 7];
        let _ = writeln!(o, "    /// Parameter fields of [`{}`].", c.name);
        let _ = writeln!(o, "    pub mod {} {{", c.name.to_ascii_lowercase());
        let _ = writeln!(o, "        use super::McParam;");
        let mut pnames = Vec::new();
        for p in &c.params {
            if !is_ident_like(&p.name) || pnames.contains(&p.name) {
                bad(format!(
                    "command `{}`: parameter `{}` is not an identifier or is repeated",
                    c.name, p.name
                ));
            }
            pnames.push(p.name.clone());
            if p.word > 6 || p.lo > p.hi || p.hi > 63 {
                bad(format!(
                    "command `{}`: parameter `{}` must lie in words 0..6 with lo <= hi < 64",
                    c.name, p.name
                ));
            }
            let width = u32::from(p.hi - p.lo) + 1;
            let mask = if width == 64 {
                u64::MAX
            } else {
                ((1u64 << width) - 1) << p.lo
            };
            if used[p.word as usize] & mask != 0 {
                bad(format!(
                    "command `{}`: parameter `{}` overlaps another",
                    c.name, p.name
                ));
            }
            used[p.word as usize] |= mask;
            let _ = writeln!(o, "        /// Word {}, bits {}:{}.", p.word, p.hi, p.lo);
            let _ = writeln!(
                o,
                "        pub const {}: McParam = McParam {{ word: {}, lo: {}, width: {width} }};",
                p.name.to_ascii_uppercase(),
                p.word,
                p.lo
            );
        }
        let _ = writeln!(o, "    }}");
    }
    let _ = writeln!(o, "    /// Every command of the map, in file order.");
    let _ = writeln!(
        o,
        "    pub static COMMANDS: &[McCommand] = &[{}];",
        names.join(", ")
    );
    let _ = writeln!(o, "}}");
    o
}
