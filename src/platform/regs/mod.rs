//! Register maps of the supported NICs, generated from data.
//!
//! # Why registers are data
//!
//! The register layout of the Intel 82576 (`igb`) and 82599 (`ixgbe`) is a
//! table, not logic: names, byte offsets in BAR0, per-queue strides, access
//! kinds and bit fields. We keep that table in `regs/<family>.toml` (one file
//! per chip family, format in `regs/README.md`) and let `build.rs` turn it into
//! Rust. That gives us:
//!
//! * **one source of truth** for the drivers (typed constants such as
//!   [`igb::CTRL`], [`igb::RDT`]`.at(n)`, [`igb::ctrl::RST`]) and for the
//!   bring-up tool's register decoder ([`RegisterMap`], [`RegisterInfo::decode`]);
//! * **validation at build time**: overlapping fields, fields wider than 32 bits,
//!   two registers (or two queue instances) at one offset, duplicated names
//!   all stop the build with a message naming the register;
//! * **reviewable diffs**: a datasheet correction is a one-line data change,
//!   with the source of each group of facts recorded next to it.
//!
//! The generated code only uses the types defined here. Each family module
//! contains, for every register, a `pub const NAME: Reg` (single register) or
//! `pub const NAME: RegArray` (per-queue / per-index array), a module `name`
//! (lower case) holding one [`Field`] constant per bit field, and a
//! `pub static MAP: RegisterMap` describing everything at run time.
//!
//! Field constant names are the datasheet names, upper-cased; characters that
//! cannot appear in an identifier become `_`, and a name starting with a digit
//! gets a leading `_` (e.g. ixgbe `AUTOC.10G_PMA_PMD` is
//! [`ixgbe::autoc::_10G_PMA_PMD`]). A field module whose lower-cased name is a
//! Rust keyword gets a trailing `_`.
//!
//! # Arrays with several address ranges
//!
//! Some arrays live in more than one address block (82599 `RDBAL(n)` is at
//! `0x1000 + 0x40*n` for n < 64 and at `0xD000 + 0x40*(n-64)` above). A
//! [`RegArray`] carries such extra blocks in [`RegArray::ranges`]; [`RegArray::at`]
//! picks the right one. Some registers also answer at a second, compatibility
//! address (82576 queue 0..3 ring registers at `0x2800 + 0x100*n`); those
//! aliases are listed in [`RegisterInfo::aliases`] so the decoder can name
//! them, but `at()` always returns the primary address.

use std::fmt;

/// One register's byte offset in BAR0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg(pub u32);

impl Reg {
    /// Byte offset in BAR0.
    pub const fn offset(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#07x}", self.0)
    }
}

/// A 16-bit register's byte offset (a map entry with `width = 16`): its own type, so that
/// code can reach it only at its width (virtio's common configuration, virtio 1.2 4.1.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg16(pub u32);

impl Reg16 {
    /// Byte offset.
    pub const fn offset(self) -> usize {
        self.0 as usize
    }
}

/// An 8-bit register's byte offset (a map entry with `width = 8`); see [`Reg16`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg8(pub u32);

impl Reg8 {
    /// Byte offset.
    pub const fn offset(self) -> usize {
        self.0 as usize
    }
}

/// An extra address block of a [`RegArray`]: instances `n >= from` (up to the
/// next range) live at `offset + (n - from) * stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegRange {
    /// First instance index in this block.
    pub from: u32,
    /// Byte offset of instance `from`.
    pub offset: u32,
    /// Distance between consecutive instances in this block.
    pub stride: u32,
}

/// A second (compatibility) address of the first `count` instances of an
/// array: instance `n < count` also answers at `offset + n * stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegAlias {
    /// Byte offset of instance 0 in the alias block.
    pub offset: u32,
    /// Distance between consecutive instances in the alias block.
    pub stride: u32,
    /// Number of instances that have an alias.
    pub count: u32,
}

/// A per-queue (or per-index) array of registers: instance `n` lives at
/// `base + n*stride`, unless one of the extra [`ranges`](Self::ranges) covers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegArray {
    /// Byte offset of instance 0.
    pub base: u32,
    /// Distance between consecutive instances (in the first block).
    pub stride: u32,
    /// Number of instances.
    pub count: u32,
    /// Extra address blocks, sorted by `from` (usually empty).
    pub ranges: &'static [RegRange],
}

impl RegArray {
    /// Instance `n`. Panics (also during const evaluation) if `n >= count`.
    pub const fn at(self, n: u32) -> Reg {
        assert!(n < self.count, "register array index out of range");
        let mut from = 0;
        let mut base = self.base;
        let mut stride = self.stride;
        let mut i = 0;
        while i < self.ranges.len() {
            let r = self.ranges[i];
            if n >= r.from {
                from = r.from;
                base = r.offset;
                stride = r.stride;
            }
            i += 1;
        }
        Reg(base + (n - from) * stride)
    }

    /// Instance `n`, or `None` if `n >= count`.
    pub const fn get(self, n: u32) -> Option<Reg> {
        if n < self.count {
            Some(self.at(n))
        } else {
            None
        }
    }

    /// Number of instances.
    pub const fn count(self) -> u32 {
        self.count
    }
}

/// A bit field inside a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Lowest bit.
    pub lo: u8,
    /// Number of bits (1..=32).
    pub width: u8,
}

impl Field {
    /// Right-aligned mask of `width` bits.
    const fn low_mask(self) -> u32 {
        if self.width >= 32 {
            u32::MAX
        } else {
            (1u32 << self.width) - 1
        }
    }

    /// Highest bit.
    pub const fn hi(self) -> u8 {
        self.lo + self.width - 1
    }

    /// The field's bits, in place (shifted).
    pub const fn mask(self) -> u32 {
        self.low_mask() << self.lo
    }

    /// The field extracted from a register value, right-aligned.
    pub const fn get(self, reg: u32) -> u32 {
        (reg >> self.lo) & self.low_mask()
    }

    /// `reg` with this field replaced by `value` (masked to the field width).
    pub const fn with(self, reg: u32, value: u32) -> u32 {
        (reg & !self.mask()) | self.val(value)
    }

    /// Same as [`mask`](Self::mask); intended for 1-bit fields (`CTRL | ctrl::RST.bit()`).
    pub const fn bit(self) -> u32 {
        self.mask()
    }

    /// `value` shifted into place (masked to the field width).
    pub const fn val(self, value: u32) -> u32 {
        (value & self.low_mask()) << self.lo
    }

    /// Whether the field is non-zero in `reg`.
    pub const fn is_set(self, reg: u32) -> bool {
        reg & self.mask() != 0
    }
}

/// Access kind of a register (as listed in the TOML `access` key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `rw`: read/write.
    ReadWrite,
    /// `ro`: read only.
    ReadOnly,
    /// `wo`: write only (reads return nothing useful).
    WriteOnly,
    /// `rc`: reading clears the register (statistics counters, cause registers).
    ReadClear,
    /// `rw1c`: writing 1 to a bit clears it.
    WriteOneClear,
    /// `rwsc`: read/write with self-clearing bits (e.g. a reset bit).
    SelfClearing,
}

impl Access {
    /// The short name used in the TOML files.
    pub const fn short_name(self) -> &'static str {
        match self {
            Access::ReadWrite => "rw",
            Access::ReadOnly => "ro",
            Access::WriteOnly => "wo",
            Access::ReadClear => "rc",
            Access::WriteOneClear => "rw1c",
            Access::SelfClearing => "rwsc",
        }
    }

    /// Whether a read has a side effect (clears the value).
    pub const fn read_has_side_effect(self) -> bool {
        matches!(self, Access::ReadClear)
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// Runtime description of one bit field, used by the bring-up tool's decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// Datasheet name.
    pub name: &'static str,
    /// Lowest bit.
    pub lo: u8,
    /// Highest bit.
    pub hi: u8,
    /// One-line meaning.
    pub description: &'static str,
    /// Named values of a multi-bit field.
    pub values: &'static [(u32, &'static str)],
}

impl FieldInfo {
    /// The same field as a [`Field`].
    pub const fn field(&self) -> Field {
        Field {
            lo: self.lo,
            width: self.hi - self.lo + 1,
        }
    }
}

/// Runtime description of one register (or register array).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterInfo {
    /// Datasheet name.
    pub name: &'static str,
    /// Byte offset of instance 0.
    pub offset: u32,
    /// Access width in bits: 32, or 8 and 16 for the narrow registers of virtio's common
    /// configuration, which must be read and written at that width.
    pub width: u8,
    /// Distance between instances in the first block (0 for a single register).
    pub stride: u32,
    /// Number of instances (1 for a single register).
    pub count: u32,
    /// Whether the map declares it as an array (`RDT[n]`) rather than a single register.
    pub is_array: bool,
    /// Access kind.
    pub access: Access,
    /// One-line meaning.
    pub description: &'static str,
    /// Extra address blocks of an array (see [`RegArray::ranges`]).
    pub ranges: &'static [RegRange],
    /// Compatibility addresses of the first instances.
    pub aliases: &'static [RegAlias],
    /// Bit fields, sorted by `lo`.
    pub fields: &'static [FieldInfo],
}

/// One field of a decoded register value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedField {
    /// Field name.
    pub name: &'static str,
    /// Lowest bit.
    pub lo: u8,
    /// Highest bit.
    pub hi: u8,
    /// Field value, right-aligned.
    pub value: u32,
    /// Name of the value, if the map lists one.
    pub meaning: Option<&'static str>,
    /// One-line meaning of the field.
    pub description: &'static str,
}

impl RegisterInfo {
    /// As a [`RegArray`] (a single register is an array of one).
    pub const fn as_array(&self) -> RegArray {
        RegArray {
            base: self.offset,
            stride: self.stride,
            count: self.count,
            ranges: self.ranges,
        }
    }

    /// Byte offset of instance `n` (primary address), or `None` if `n >= count`.
    pub fn instance_offset(&self, n: u32) -> Option<u32> {
        self.as_array().get(n).map(|r| r.0)
    }

    /// Every address of this register: `(offset, instance)` for each primary
    /// instance, then for each alias.
    pub fn addresses(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let primary = (0..self.count).map(move |n| (self.as_array().at(n).0, n));
        let aliases = self
            .aliases
            .iter()
            .flat_map(|a| (0..a.count).map(move |n| (a.offset + n * a.stride, n)));
        primary.chain(aliases)
    }

    /// Instance index whose primary or alias address is `off`, if any.
    pub fn instance_at(&self, off: u32) -> Option<u32> {
        let in_block = |base: u32, stride: u32, first: u32, len: u32| -> Option<u32> {
            if off < base {
                return None;
            }
            let d = off - base;
            if stride == 0 {
                return (d == 0).then_some(first);
            }
            let q = d / stride;
            (q * stride == d && q < len).then_some(first + q)
        };
        let mut blocks: Vec<(u32, u32, u32)> = Vec::with_capacity(1 + self.ranges.len());
        blocks.push((0, self.offset, self.stride));
        blocks.extend(self.ranges.iter().map(|r| (r.from, r.offset, r.stride)));
        for (i, &(from, base, stride)) in blocks.iter().enumerate() {
            let end = blocks.get(i + 1).map_or(self.count, |b| b.0);
            if let Some(n) = in_block(base, stride, from, end - from) {
                return Some(n);
            }
        }
        self.aliases
            .iter()
            .find_map(|a| in_block(a.offset, a.stride, 0, a.count))
    }

    /// Splits `value` into its named fields (bits not covered by a field are not reported).
    pub fn decode(&self, value: u32) -> Vec<DecodedField> {
        self.fields
            .iter()
            .map(|f| {
                let v = f.field().get(value);
                DecodedField {
                    name: f.name,
                    lo: f.lo,
                    hi: f.hi,
                    value: v,
                    meaning: f.values.iter().find(|(k, _)| *k == v).map(|(_, m)| *m),
                    description: f.description,
                }
            })
            .collect()
    }

    /// Looks a field up by name (case-insensitive).
    pub fn field(&self, name: &str) -> Option<&FieldInfo> {
        self.fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// Display name of instance `n`: `CTRL` for a single register, `RDT[3]` for an array.
    pub fn instance_name(&self, n: u32) -> String {
        if self.is_array {
            format!("{}[{n}]", self.name)
        } else {
            self.name.to_string()
        }
    }
}

/// All registers of one chip family.
#[derive(Debug)]
pub struct RegisterMap {
    /// Family name (`igb`, `ixgbe`).
    pub family: &'static str,
    /// Registers in file order.
    pub registers: &'static [RegisterInfo],
}

impl RegisterMap {
    /// Finds a register by name, case-insensitively. Instance forms `RDT[3]`,
    /// `RDT(3)` and `RDT3` are accepted for arrays (the instance must be in
    /// range); see [`lookup`](Self::lookup) to also get the instance.
    pub fn find(&self, name: &str) -> Option<&RegisterInfo> {
        self.lookup(name).map(|(r, _)| r)
    }

    /// Like [`find`](Self::find), also returning the instance index (0 when
    /// the name has none). An exact register name always wins, so `PRC64` is
    /// the counter, not instance 64 of a `PRC` array.
    pub fn lookup(&self, name: &str) -> Option<(&RegisterInfo, u32)> {
        let name = name.trim();
        let by_name = |n: &str| {
            self.registers
                .iter()
                .find(|r| r.name.eq_ignore_ascii_case(n))
        };
        if let Some(r) = by_name(name) {
            return Some((r, 0));
        }
        fn in_range(r: &RegisterInfo, n: u32) -> Option<(&RegisterInfo, u32)> {
            (n < r.count).then_some((r, n))
        }
        // NAME[n] or NAME(n), with n decimal or 0x-hex.
        for (open, close) in [('[', ']'), ('(', ')')] {
            if let Some(body) = name.strip_suffix(close) {
                if let Some((base, idx)) = body.split_once(open) {
                    let r = by_name(base.trim())?;
                    let n = parse_index(idx.trim())?;
                    return in_range(r, n);
                }
            }
        }
        // NAMEn: trailing decimal digits, only for arrays.
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && digits < name.len() {
            let (base, idx) = name.split_at(name.len() - digits);
            let r = by_name(base)?;
            if r.is_array {
                return in_range(r, idx.parse().ok()?);
            }
        }
        None
    }

    /// The register (and instance) at byte offset `off`, including alias addresses.
    pub fn by_offset(&self, off: u32) -> Option<(&RegisterInfo, u32)> {
        self.registers
            .iter()
            .find_map(|r| r.instance_at(off).map(|n| (r, n)))
    }
}

fn parse_index(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Where a statistics counter is read (all clear on read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// One 32-bit register.
    One(Reg),
    /// A wide counter split into a low and a high register, read low first.
    Wide(Reg, Reg),
    /// The sum of an array of registers (per packet-buffer counters, say).
    Sum(RegArray),
}

/// A chip's statistics, generated from the `[stats]` table of its map: the counters reported,
/// by datasheet name and in order, and the per-queue drop counters.
#[derive(Debug)]
pub struct Stats {
    /// Name and source of every counter.
    pub counters: &'static [(&'static str, Counter)],
    /// The per-queue drop counter of queue q is `queue_drops.at(q)`.
    pub queue_drops: RegArray,
    /// Their names, by queue (at most 16).
    pub queue_drop_names: &'static [&'static str],
}

/// Intel 82576 (igb) registers, generated from `regs/igb.toml`.
#[allow(
    dead_code,
    non_snake_case,
    non_upper_case_globals,
    clippy::unreadable_literal
)]
pub mod igb {
    include!(concat!(env!("OUT_DIR"), "/regs_igb.rs"));
}

/// Intel 82599 (ixgbe) registers, generated from `regs/ixgbe.toml`.
#[allow(
    dead_code,
    non_snake_case,
    non_upper_case_globals,
    clippy::unreadable_literal
)]
pub mod ixgbe {
    include!(concat!(env!("OUT_DIR"), "/regs_ixgbe.rs"));
}

/// The QBMan software portal and the management-complex commands of the queue-manager
/// device (`qm:N`), generated from `regs/qbman.toml`.
#[allow(
    dead_code,
    non_snake_case,
    non_upper_case_globals,
    clippy::unreadable_literal
)]
pub mod qbman {
    include!(concat!(env!("OUT_DIR"), "/regs_qbman.rs"));
}

/// The virtio 1.x PCI common configuration, generated from `regs/virtio.toml` (offsets are
/// from the structure's start, which the capability walk finds).
#[allow(
    dead_code,
    non_snake_case,
    non_upper_case_globals,
    clippy::unreadable_literal
)]
pub mod virtio {
    include!(concat!(env!("OUT_DIR"), "/regs_virtio.rs"));
}

/// The virtio-net device configuration, generated from `regs/virtio_net.toml`.
#[allow(
    dead_code,
    non_snake_case,
    non_upper_case_globals,
    clippy::unreadable_literal
)]
pub mod virtio_net {
    include!(concat!(env!("OUT_DIR"), "/regs_virtio_net.rs"));
}

/// Every known family.
pub fn families() -> &'static [&'static RegisterMap] {
    static ALL: [&RegisterMap; 5] = [
        &igb::MAP,
        &ixgbe::MAP,
        &qbman::MAP,
        &virtio::MAP,
        &virtio_net::MAP,
    ];
    &ALL
}

/// A management-complex command (DPAA2's MC): the header's `cmd_id` is `id << 4 | version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McCommand {
    /// Name, as in the map (`DPNI_OPEN`).
    pub name: &'static str,
    /// Command id before the version (`0x801`).
    pub id: u16,
    /// Command version.
    pub version: u8,
}

impl McCommand {
    /// The header's `cmd_id` field.
    pub const fn cmd_id(&self) -> u16 {
        self.id << 4 | self.version as u16
    }
}

/// A field of a management command's seven 64-bit parameter words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McParam {
    /// Parameter word (0..6).
    pub word: u8,
    /// Lowest bit.
    pub lo: u8,
    /// Width in bits.
    pub width: u8,
}

impl McParam {
    const fn mask(&self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    /// The field's value in `params`.
    pub const fn get(&self, params: &[u64; 7]) -> u64 {
        params[self.word as usize] >> self.lo & self.mask()
    }

    /// Writes `value` (cut to the field's width) into `params`.
    pub fn put(&self, params: &mut [u64; 7], value: u64) {
        let w = &mut params[self.word as usize];
        *w = *w & !(self.mask() << self.lo) | (value & self.mask()) << self.lo;
    }
}

/// The register map of a family: `igb` (82576), `ixgbe` (82599) or `qbman` (the `qm` device's
/// software portal), case-insensitive.
pub fn family(name: &str) -> Option<&'static RegisterMap> {
    let n = name.trim();
    if n.eq_ignore_ascii_case("igb") || n.eq_ignore_ascii_case("82576") {
        Some(&igb::MAP)
    } else if n.eq_ignore_ascii_case("ixgbe") || n.eq_ignore_ascii_case("82599") {
        Some(&ixgbe::MAP)
    } else if n.eq_ignore_ascii_case("qbman") || n.eq_ignore_ascii_case("qm") {
        Some(&qbman::MAP)
    } else if n.eq_ignore_ascii_case("virtio") {
        Some(&virtio::MAP)
    } else if n.eq_ignore_ascii_case("virtio_net") {
        Some(&virtio_net::MAP)
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
