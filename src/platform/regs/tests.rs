//! Tests of the generated register maps and of the helper types.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn maps() -> [&'static RegisterMap; 2] {
    [&igb::MAP, &ixgbe::MAP]
}

#[test]
fn fields_fit_and_do_not_overlap() {
    for map in maps() {
        for r in map.registers {
            let mut used = 0u32;
            for f in r.fields {
                assert!(
                    f.lo <= f.hi,
                    "{}.{}.{}: lo > hi",
                    map.family,
                    r.name,
                    f.name
                );
                assert!(
                    f.hi <= 31,
                    "{}.{}.{}: beyond bit 31",
                    map.family,
                    r.name,
                    f.name
                );
                let m = f.field().mask();
                assert_eq!(m.count_ones(), u32::from(f.hi - f.lo + 1));
                assert_eq!(
                    used & m,
                    0,
                    "{}.{}.{} overlaps another field",
                    map.family,
                    r.name,
                    f.name
                );
                used |= m;
                for (v, _) in f.values {
                    assert_eq!(
                        f.field().get(f.field().val(*v)),
                        *v,
                        "{}.{}.{} value {v}",
                        map.family,
                        r.name,
                        f.name
                    );
                }
            }
            let mut names: Vec<String> = r
                .fields
                .iter()
                .map(|f| f.name.to_ascii_uppercase())
                .collect();
            names.sort();
            names.dedup();
            assert_eq!(
                names.len(),
                r.fields.len(),
                "{}.{}: duplicate field names",
                map.family,
                r.name
            );
        }
    }
}

#[test]
fn no_two_registers_share_an_offset() {
    for map in maps() {
        let mut seen: HashMap<u32, String> = HashMap::new();
        for r in map.registers {
            for (off, n) in r.addresses() {
                assert_eq!(
                    off % 4,
                    0,
                    "{}: {} misaligned",
                    map.family,
                    r.instance_name(n)
                );
                if let Some(other) = seen.insert(off, r.instance_name(n)) {
                    panic!(
                        "{}: {off:#x} used by {other} and {}",
                        map.family,
                        r.instance_name(n)
                    );
                }
            }
        }
    }
}

#[test]
fn names_unique_case_insensitive() {
    for map in maps() {
        let mut names: Vec<String> = map
            .registers
            .iter()
            .map(|r| r.name.to_ascii_uppercase())
            .collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "{}: duplicate register names", map.family);
    }
}

#[test]
fn by_offset_inverts_every_address() {
    for map in maps() {
        for r in map.registers {
            for (off, n) in r.addresses() {
                let (found, m) = map
                    .by_offset(off)
                    .unwrap_or_else(|| panic!("{off:#x} not found"));
                assert_eq!((found.name, m), (r.name, n));
            }
        }
        // A gap between registers.
        assert!(map.by_offset(0x0004).is_none());
        assert!(map.by_offset(0x0002).is_none());
    }
}

#[test]
fn constants_match_map() {
    assert_eq!(igb::MAP.find("CTRL").unwrap().offset, igb::CTRL.0);
    assert_eq!(igb::MAP.find("RDT").unwrap().as_array(), igb::RDT);
    assert_eq!(ixgbe::MAP.find("SRRCTL").unwrap().as_array(), ixgbe::SRRCTL);
    for map in maps() {
        for r in map.registers {
            for n in 0..r.count {
                assert_eq!(r.instance_offset(n), Some(r.as_array().at(n).0));
            }
            assert_eq!(r.instance_offset(r.count), None);
        }
    }
}

#[test]
fn spot_check_igb_offsets() {
    assert_eq!(igb::CTRL.offset(), 0x0000);
    assert_eq!(igb::STATUS.offset(), 0x0008);
    assert_eq!(igb::EECD.offset(), 0x0010);
    assert_eq!(igb::EERD.offset(), 0x0014);
    assert_eq!(igb::CTRL_EXT.offset(), 0x0018);
    assert_eq!(igb::MDIC.offset(), 0x0020);
    assert_eq!(igb::VET.offset(), 0x0038);
    assert_eq!(igb::ICR.offset(), 0x00C0);
    assert_eq!(igb::IMC.offset(), 0x00D8);
    assert_eq!(igb::RCTL.offset(), 0x0100);
    assert_eq!(igb::TCTL.offset(), 0x0400);
    assert_eq!(igb::GPIE.offset(), 0x1514);
    assert_eq!(igb::EICR.offset(), 0x1580);
    assert_eq!(igb::EIMC.offset(), 0x1528);
    assert_eq!(igb::RXPBS.offset(), 0x2404);
    assert_eq!(igb::TXPBS.offset(), 0x3404);
    assert_eq!(igb::RDT.at(0).offset(), 0xC018);
    assert_eq!(igb::RDT.at(1).offset(), 0xC058);
    assert_eq!(igb::RDBAL.at(15).offset(), 0xC3C0);
    assert_eq!(igb::SRRCTL.at(2).offset(), 0xC08C);
    assert_eq!(igb::TDT.at(1).offset(), 0xE058);
    assert_eq!(igb::TDWBAL.at(0).offset(), 0xE038);
    assert_eq!(igb::EITR.at(24).offset(), 0x16E0);
    assert_eq!(igb::IVAR.at(7).offset(), 0x171C);
    assert_eq!(igb::IVAR_MISC.offset(), 0x1740);
    assert_eq!(igb::VFTA.count(), 128);
    assert_eq!(igb::VFTA.at(0).offset(), 0x5600);
    assert_eq!(igb::MTA.count(), 128);
    assert_eq!(igb::RAL.at(0).offset(), 0x5400);
    assert_eq!(igb::RAH.at(0).offset(), 0x5404);
    assert_eq!(igb::RAL.at(16).offset(), 0x54E0);
    assert_eq!(igb::RAH.at(23).offset(), 0x54E4 + 7 * 8);
    assert_eq!(igb::MRQC.offset(), 0x5818);
    assert_eq!(igb::RETA.at(31).offset(), 0x5C7C);
    assert_eq!(igb::RSSRK.at(9).offset(), 0x5CA4);
    assert_eq!(igb::MPC.offset(), 0x4010);
    assert_eq!(igb::GPRC.offset(), 0x4074);
    assert_eq!(igb::GPTC.offset(), 0x4080);
    assert_eq!(igb::GORCL.offset(), 0x4088);
    assert_eq!(igb::GORCH.offset(), 0x408C);
    assert_eq!(igb::RNBC.offset(), 0x40A0);
    assert_eq!(igb::PTC1522.offset(), 0x40EC);
    // Compatibility alias of queue 1's RDT decodes to RDT[1].
    let (r, n) = igb::MAP.by_offset(0x2918).unwrap();
    assert_eq!((r.name, n), ("RDT", 1));
}

#[test]
fn spot_check_ixgbe_offsets() {
    assert_eq!(ixgbe::CTRL.offset(), 0x0000);
    assert_eq!(ixgbe::EEC.offset(), 0x10010);
    assert_eq!(ixgbe::EERD.offset(), 0x10014);
    assert_eq!(ixgbe::EICR.offset(), 0x0800);
    assert_eq!(ixgbe::EIMC.offset(), 0x0888);
    assert_eq!(ixgbe::GPIE.offset(), 0x0898);
    assert_eq!(ixgbe::IVAR_MISC.offset(), 0x0A00);
    assert_eq!(ixgbe::EITR.at(23).offset(), 0x087C);
    assert_eq!(ixgbe::EITR.at(24).offset(), 0x12300);
    assert_eq!(ixgbe::EITR.at(25).offset(), 0x12304);
    assert_eq!(ixgbe::RDT.at(1).offset(), 0x1058);
    assert_eq!(ixgbe::RDBAL.at(63).offset(), 0x1FC0);
    assert_eq!(ixgbe::RDBAL.at(64).offset(), 0xD000);
    assert_eq!(ixgbe::RXDCTL.at(65).offset(), 0xD068);
    assert_eq!(ixgbe::SRRCTL.at(0).offset(), 0x2100);
    assert_eq!(ixgbe::SRRCTL.at(15).offset(), 0x213C);
    assert_eq!(ixgbe::SRRCTL.at(16).offset(), 0x1414);
    assert_eq!(ixgbe::SRRCTL.at(63).offset(), 0x1014 + 63 * 0x40);
    assert_eq!(ixgbe::SRRCTL.at(64).offset(), 0xD014);
    assert_eq!(ixgbe::DCA_RXCTRL.at(3).offset(), 0x220C);
    assert_eq!(ixgbe::DCA_RXCTRL.at(16).offset(), 0x140C);
    assert_eq!(ixgbe::TDT.at(2).offset(), 0x6098);
    assert_eq!(ixgbe::TDWBAH.at(0).offset(), 0x603C);
    assert_eq!(ixgbe::RDRXCTL.offset(), 0x2F00);
    assert_eq!(ixgbe::RXCTRL.offset(), 0x3000);
    assert_eq!(ixgbe::RXPBSIZE.at(0).offset(), 0x3C00);
    assert_eq!(ixgbe::TXPBSIZE.at(0).offset(), 0xCC00);
    assert_eq!(ixgbe::HLREG0.offset(), 0x4240);
    assert_eq!(ixgbe::MAXFRS.offset(), 0x4268);
    assert_eq!(ixgbe::AUTOC.offset(), 0x42A0);
    assert_eq!(ixgbe::LINKS.offset(), 0x42A4);
    assert_eq!(ixgbe::RTTDCS.offset(), 0x4900);
    assert_eq!(ixgbe::DMATXCTL.offset(), 0x4A80);
    assert_eq!(ixgbe::DTXMXSZRQ.offset(), 0x8100);
    assert_eq!(ixgbe::EXVET.offset(), 0x5078);
    assert_eq!(ixgbe::FCTRL.offset(), 0x5080);
    assert_eq!(ixgbe::VLNCTRL.offset(), 0x5088);
    assert_eq!(ixgbe::VFTA.at(0).offset(), 0xA000);
    assert_eq!(ixgbe::VFTA.count(), 128);
    assert_eq!(ixgbe::RAL.at(0).offset(), 0x5400);
    assert_eq!(ixgbe::RAH.at(15).offset(), 0x547C);
    assert_eq!(ixgbe::RAL.at(16).offset(), 0xA280);
    assert_eq!(ixgbe::VLVF.at(63).offset(), 0xF1FC);
    assert_eq!(ixgbe::VLVFB.at(127).offset(), 0xF3FC);
    assert_eq!(ixgbe::MPC.at(0).offset(), 0x3FA0);
    assert_eq!(ixgbe::MPC.count(), 8);
    assert_eq!(ixgbe::QPRDC.at(1).offset(), 0x1470);
    assert_eq!(ixgbe::GPRC.offset(), 0x4074);
    assert_eq!(ixgbe::GPTC.offset(), 0x4080);
    assert_eq!(ixgbe::GORCL.offset(), 0x4088);
    assert_eq!(ixgbe::GORCH.offset(), 0x408C);
    assert_eq!(ixgbe::GOTCL.offset(), 0x4090);
    assert_eq!(ixgbe::GOTCH.offset(), 0x4094);
    assert_eq!(ixgbe::RXDGPC.offset(), 0x2F50);
    assert_eq!(ixgbe::TXDGPC.offset(), 0x87A0);
}

/// Every field of the spec's `struct virtio_pci_common_cfg` (virtio 1.2 cs01, 4.1.4.3) up to
/// the queue addresses, and of `struct virtio_net_config` (5.1.4) up to the MTU, is a register
/// of its own at the spec's offset and width; the 64-bit addresses are 32-bit halves.
#[test]
fn virtio_registers_are_the_spec_fields() {
    let spec: [(&RegisterMap, &str, u32, u8); 23] = [
        (&virtio::MAP, "DEVICE_FEATURE_SELECT", 0x00, 32),
        (&virtio::MAP, "DEVICE_FEATURE", 0x04, 32),
        (&virtio::MAP, "DRIVER_FEATURE_SELECT", 0x08, 32),
        (&virtio::MAP, "DRIVER_FEATURE", 0x0c, 32),
        (&virtio::MAP, "CONFIG_MSIX_VECTOR", 0x10, 16),
        (&virtio::MAP, "NUM_QUEUES", 0x12, 16),
        (&virtio::MAP, "DEVICE_STATUS", 0x14, 8),
        (&virtio::MAP, "CONFIG_GENERATION", 0x15, 8),
        (&virtio::MAP, "QUEUE_SELECT", 0x16, 16),
        (&virtio::MAP, "QUEUE_SIZE", 0x18, 16),
        (&virtio::MAP, "QUEUE_MSIX_VECTOR", 0x1a, 16),
        (&virtio::MAP, "QUEUE_ENABLE", 0x1c, 16),
        (&virtio::MAP, "QUEUE_NOTIFY_OFF", 0x1e, 16),
        (&virtio::MAP, "QUEUE_DESC_LO", 0x20, 32),
        (&virtio::MAP, "QUEUE_DESC_HI", 0x24, 32),
        (&virtio::MAP, "QUEUE_DRIVER_LO", 0x28, 32),
        (&virtio::MAP, "QUEUE_DRIVER_HI", 0x2c, 32),
        (&virtio::MAP, "QUEUE_DEVICE_LO", 0x30, 32),
        (&virtio::MAP, "QUEUE_DEVICE_HI", 0x34, 32),
        (&virtio_net::MAP, "MAC0", 0x00, 8),
        (&virtio_net::MAP, "STATUS", 0x06, 16),
        (&virtio_net::MAP, "MAX_VIRTQUEUE_PAIRS", 0x08, 16),
        (&virtio_net::MAP, "MTU", 0x0a, 16),
    ];
    for (map, name, offset, width) in spec {
        let r = map.find(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((r.offset, r.width), (offset, width), "{name}");
    }
    assert_eq!(
        virtio::QUEUE_SELECT,
        Reg16(0x16),
        "a 16-bit register has the 16-bit type"
    );
    assert_eq!(virtio::DEVICE_STATUS, Reg8(0x14));
    assert_eq!(
        virtio::MAP.registers.len(),
        19,
        "nothing else in the common configuration"
    );
    assert_eq!(virtio_net::MAP.registers.len(), 9);
}

#[test]
fn spot_check_fields() {
    assert_eq!(igb::ctrl::RST.bit(), 1 << 26);
    assert_eq!(igb::ctrl::VME.bit(), 1 << 30);
    assert_eq!(igb::rctl::SECRC.bit(), 1 << 26);
    assert_eq!(igb::srrctl::DESCTYPE.val(1), 0x0200_0000);
    assert_eq!(igb::srrctl::RDMTS.mask(), 0x01F0_0000);
    assert_eq!(igb::ctrl_ext::EXT_VLAN.bit(), 1 << 26);
    assert_eq!(igb::mdic::OP.val(2) | igb::mdic::PHYADD.val(1), 0x0820_0000);
    assert_eq!(igb::rah::POOLSEL.mask(), 0x03FC_0000);
    assert_eq!(igb::ims::LSC, igb::icr::LSC);
    assert_eq!(
        ixgbe::ctrl::RST.bit() | ixgbe::ctrl::LNK_RST.bit(),
        0x0400_0008
    );
    assert_eq!(ixgbe::autoc::LMS.val(3), 0x6000);
    assert_eq!(ixgbe::autoc::_10G_PMA_PMD.mask(), 0x180);
    assert_eq!(ixgbe::links::LINK_SPEED.mask(), 0x3000_0000);
    assert_eq!(ixgbe::maxfrs::MFS.val(9018), 9018 << 16);
    assert_eq!(ixgbe::srrctl::DROP_EN.bit(), 0x1000_0000);
    assert_eq!(ixgbe::srrctl::DESCTYPE.val(1), 0x0200_0000);
    assert_eq!(ixgbe::txdctl::WTHRESH.val(4), 4 << 16);
    assert_eq!(ixgbe::dmatxctl::VT.get(0x8100_0001), 0x8100);
    assert_eq!(ixgbe::eicr::LSC.bit(), 1 << 20);
}

#[test]
fn const_evaluation() {
    const Q3: Reg = igb::RDT.at(3);
    const MASK: u32 = igb::ctrl::SPEED.mask();
    assert_eq!(Q3, Reg(0xC0D8));
    assert_eq!(MASK, 0x300);
}

#[test]
#[should_panic(expected = "out of range")]
fn array_index_out_of_range_panics() {
    let n = igb::RDT.count();
    let _ = igb::RDT.at(n);
}

#[test]
fn find_and_lookup() {
    let m = family("IGB").unwrap();
    assert_eq!(m.family, "igb");
    assert_eq!(family("ixgbe").unwrap().family, "ixgbe");
    assert_eq!(family("82599").unwrap().family, "ixgbe");
    assert!(family("e1000e").is_none());

    assert_eq!(m.find("ctrl").unwrap().name, "CTRL");
    assert_eq!(m.find("Ctrl_Ext").unwrap().name, "CTRL_EXT");
    assert_eq!(
        m.lookup("rdt[3]").map(|(r, n)| (r.name, n)),
        Some(("RDT", 3))
    );
    assert_eq!(
        m.lookup("RDT(0x3)").map(|(r, n)| (r.name, n)),
        Some(("RDT", 3))
    );
    assert_eq!(m.lookup("rdt3").map(|(r, n)| (r.name, n)), Some(("RDT", 3)));
    assert_eq!(m.lookup("RDT").map(|(r, n)| (r.name, n)), Some(("RDT", 0)));
    assert_eq!(m.find("RDT3").unwrap().name, "RDT");
    assert!(m.lookup("RDT16").is_none(), "instance out of range");
    assert!(m.lookup("RDT[16]").is_none());
    // Exact names that end in digits win over the instance form.
    assert_eq!(
        m.lookup("prc64").map(|(r, n)| (r.name, n)),
        Some(("PRC64", 0))
    );
    assert_eq!(
        m.lookup("PTC1522").map(|(r, n)| (r.name, n)),
        Some(("PTC1522", 0))
    );
    // Single registers take no instance suffix.
    assert!(m.lookup("CTRL1").is_none());
    assert!(m.lookup("NOPE").is_none());
    assert!(m.lookup("").is_none());

    let x = family("ixgbe").unwrap();
    let (r, n) = x.lookup("srrctl[20]").unwrap();
    assert_eq!((r.name, n), ("SRRCTL", 20));
    assert_eq!(r.instance_offset(n), Some(0x1014 + 20 * 0x40));
    assert_eq!(r.instance_name(n), "SRRCTL[20]");
    let (r, n) = x.by_offset(0x1014 + 20 * 0x40).unwrap();
    assert_eq!((r.name, n), ("SRRCTL", 20));
    assert_eq!(
        x.by_offset(0x12300).map(|(r, n)| (r.name, n)),
        Some(("EITR", 24))
    );
}

#[test]
fn decode_known_value() {
    let ctrl = igb::MAP.find("CTRL").unwrap();
    let v = igb::ctrl::RST.bit() | igb::ctrl::VME.bit() | igb::ctrl::SPEED.val(2);
    let d = ctrl.decode(v);
    assert_eq!(d.len(), ctrl.fields.len());
    let get = |name: &str| d.iter().find(|f| f.name == name).copied().unwrap();
    assert_eq!(get("RST").value, 1);
    assert_eq!((get("RST").lo, get("RST").hi), (26, 26));
    assert_eq!(get("VME").value, 1);
    assert_eq!(get("FD").value, 0);
    assert_eq!(get("SPEED").value, 2);
    assert_eq!(get("SPEED").meaning, Some("1000 Mb/s"));
    let set: Vec<&str> = d.iter().filter(|f| f.value != 0).map(|f| f.name).collect();
    assert_eq!(set, ["SPEED", "RST", "VME"]);

    let links = ixgbe::MAP.find("links").unwrap();
    let d = links.decode(0x7000_0000);
    let speed = d.iter().find(|f| f.name == "LINK_SPEED").unwrap();
    assert_eq!((speed.value, speed.meaning), (3, Some("10 Gb/s")));
    assert_eq!(links.access, Access::ReadOnly);
    assert_eq!(ixgbe::MAP.find("GORCL").unwrap().access, Access::ReadClear);
    assert_eq!(igb::MAP.find("MPC").unwrap().access, Access::ReadClear);
}

#[test]
fn fields_like_copies_fields() {
    let icr = igb::MAP.find("ICR").unwrap();
    let ims = igb::MAP.find("IMS").unwrap();
    assert_eq!(icr.fields, ims.fields);
    assert!(!icr.fields.is_empty());
}

#[test]
fn field_full_width() {
    let f = Field { lo: 0, width: 32 };
    assert_eq!(f.mask(), u32::MAX);
    assert_eq!(f.get(0xDEAD_BEEF), 0xDEAD_BEEF);
    assert_eq!(f.with(1, 7), 7);
    let top = Field { lo: 31, width: 1 };
    assert_eq!(top.bit(), 0x8000_0000);
    assert_eq!(top.hi(), 31);
}

fn any_field() -> impl Strategy<Value = Field> {
    (0u8..32)
        .prop_flat_map(|lo| (Just(lo), 1u8..=(32 - lo)))
        .prop_map(|(lo, width)| Field { lo, width })
}

proptest! {
    #[test]
    fn with_then_get_round_trips(f in any_field(), reg in any::<u32>(), value in any::<u32>()) {
        let low = if f.width == 32 { u32::MAX } else { (1u32 << f.width) - 1 };
        let r = f.with(reg, value);
        prop_assert_eq!(f.get(r), value & low);
        // Bits outside the field are untouched.
        prop_assert_eq!(r & !f.mask(), reg & !f.mask());
    }

    #[test]
    fn val_is_masked_and_shifted(f in any_field(), value in any::<u32>()) {
        prop_assert_eq!(f.val(value) & !f.mask(), 0);
        prop_assert_eq!(f.get(f.val(value)), f.get(f.val(value) | !f.mask()));
        prop_assert_eq!(f.with(0, value), f.val(value));
        prop_assert_eq!(f.bit(), f.mask());
    }

    #[test]
    fn get_with_identity(f in any_field(), reg in any::<u32>()) {
        prop_assert_eq!(f.with(reg, f.get(reg)), reg);
    }

    #[test]
    fn decode_reassembles_covered_bits(value in any::<u32>()) {
        for map in maps() {
            for r in map.registers {
                let mut rebuilt = 0u32;
                let mut covered = 0u32;
                for d in r.decode(value) {
                    let f = Field { lo: d.lo, width: d.hi - d.lo + 1 };
                    rebuilt |= f.val(d.value);
                    covered |= f.mask();
                }
                prop_assert_eq!(rebuilt, value & covered);
            }
        }
    }
}
