//! The resource table printed by `mlxcel-amdgpu inspect`: one line per kernel
//! with its name, VGPRs, SGPRs, LDS, scratch, wavefront size and kernarg size.
//!
//! The LDS column is the static LDS of the metadata
//! (`.group_segment_fixed_size`) plus the workgroup memory the launcher gives
//! the kernel at launch ([`launch::workgroup_mem`]), which the metadata cannot
//! show: `0+16384 (launch)` is no static LDS and 16 KiB at every launch,
//! `0+<=61440 (launch)` an amount that depends on the shape, at most 60 KiB.

use std::fmt::Write as _;

use crate::CodeObject;
use crate::launch::{self, LaunchMem};

/// The column headers of the table.
pub const HEADERS: [&str; 7] = ["kernel", "VGPRs", "SGPRs", "LDS", "scratch", "wave", "kernarg"];

/// What the columns mean, printed above the table.
pub const LEGEND: &str = "LDS: static bytes + bytes given at launch (`+N (launch)`, `+<=N`: at most N, by shape); \
                          scratch: bytes per work-item; kernarg: bytes";

/// The LDS cell of a kernel with `fixed` bytes of static LDS, launched with `launch`.
pub fn lds_cell(fixed: u32, launch: LaunchMem) -> String {
    match launch {
        LaunchMem::None => fixed.to_string(),
        LaunchMem::Fixed(n) => format!("{fixed}+{n} (launch)"),
        LaunchMem::UpTo(n) => format!("{fixed}+<={n} (launch)"),
    }
}

impl CodeObject {
    /// The target line, the legend, and a table of the kernels' resources:
    /// one line per kernel with its name, VGPRs, SGPRs, LDS (static group
    /// segment bytes, plus what the launcher gives at launch), scratch (private
    /// segment bytes per work-item), wavefront size and kernarg segment size.
    pub fn summary(&self) -> String {
        let rows: Vec<[String; 7]> = self
            .kernels
            .iter()
            .map(|k| {
                [
                    k.name.clone(),
                    k.vgpr_count.to_string(),
                    k.sgpr_count.to_string(),
                    lds_cell(k.group_segment_fixed_size, launch::workgroup_mem(&k.name)),
                    k.private_segment_fixed_size.to_string(),
                    k.wavefront_size.to_string(),
                    k.kernarg_segment_size.to_string(),
                ]
            })
            .collect();
        let mut widths = HEADERS.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} (mach 0x{:x}, ABI version {}, metadata {}.{}): {} kernel(s)",
            if self.target.is_empty() { "<no target>" } else { &self.target },
            self.mach,
            self.abi_version,
            self.metadata_version.0,
            self.metadata_version.1,
            self.kernels.len()
        );
        let _ = writeln!(out, "{LEGEND}");
        let mut line = |cells: [&str; 7]| {
            let mut s = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i == 0 {
                    let _ = write!(s, "{cell:<w$}");
                } else {
                    let _ = write!(s, "  {cell:>w$}");
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(HEADERS);
        for row in &rows {
            line(row.each_ref().map(String::as_str));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Elf, Mp, encode, kernel_map, metadata_with, probe_args};
    use kernels_device::geometry::{probe, xielu};

    #[test]
    fn summary_table() {
        // Static LDS (which the audit refuses in shipped objects) to show the
        // static+launch cells.
        let with_static_lds = |mut k: Vec<(&'static str, Mp)>| {
            for (key, v) in k.iter_mut() {
                if *key == ".group_segment_fixed_size" {
                    *v = Mp::U(256);
                }
            }
            k
        };
        let mut k2 = with_static_lds(kernel_map("a_much_longer_kernel_name", "a_much_longer_kernel_name.kd", vec![]));
        for (key, v) in k2.iter_mut() {
            if *key == ".vgpr_count" {
                *v = Mp::U(128);
            }
        }
        let k3 = kernel_map("xielu_bf16", "xielu_bf16.kd", vec![]);
        let meta = metadata_with(vec![with_static_lds(kernel_map("probe", "probe.kd", probe_args())), k2, k3]);
        let co = CodeObject::parse(&Elf::probe(encode(&meta, false)).build()).unwrap();
        let s = co.summary();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 6, "{s}");
        assert!(lines[0].contains("amdgcn-amd-amdhsa--gfx1151") && lines[0].contains("3 kernel(s)"));
        assert_eq!(lines[1], LEGEND);
        let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(cells(lines[2]), HEADERS);
        let probe_lds = format!("256+{}", probe::WORKGROUP_MEM_BYTES);
        assert_eq!(cells(lines[3]), ["probe", "21", "12", &probe_lds, "(launch)", "0", "32", "272"]);
        assert_eq!(cells(lines[4]), ["a_much_longer_kernel_name", "128", "12", "256", "0", "32", "272"]);
        let xielu_lds = format!("0+{}", xielu::BF16_WORKGROUP_MEM_BYTES);
        assert_eq!(cells(lines[5]), ["xielu_bf16", "21", "12", &xielu_lds, "(launch)", "0", "32", "272"]);
        // Columns line up.
        assert_eq!(lines[2].len(), lines[3].len());
        assert_eq!(lines[3].len(), lines[4].len());
        assert_eq!(lines[4].len(), lines[5].len());
    }

    #[test]
    fn lds_cells() {
        assert_eq!(lds_cell(0, LaunchMem::None), "0");
        assert_eq!(lds_cell(0, LaunchMem::Fixed(16384)), "0+16384 (launch)");
        assert_eq!(lds_cell(8, LaunchMem::UpTo(61440)), "8+<=61440 (launch)");
    }
}
