//! The audit: checks a code object against the kernel list of the device
//! crate, the one place where "what the launchers will pack" meets "what the
//! compiler built". Used by `build.rs` (a failed audit fails the build) and by
//! the host before it loads an object.
//!
//! The rules, for every kernel of [`kernels_device::entry::KERNELS`]:
//! - the object references no undefined symbol (a panic path that survived
//!   optimization calls `mlxcel_kernel_may_panic`, defined nowhere);
//! - the kernel is in the metadata and its 64-byte descriptor symbol `name.kd`
//!   is defined;
//! - wavefront size 32, no scratch (private segment), no dynamic stack, no
//!   SGPR or VGPR spills;
//! - the descriptor's floating-point modes are round to nearest even with
//!   denormals kept (when its bytes are readable);
//! - `.max_flat_workgroup_size` equals the kernel's launch bound where
//!   `geometry::AMDGPU_LAUNCH_BOUNDS` gives one (the build wrote it), and
//!   otherwise admits the largest workgroup any launcher uses
//!   ([`launch::MAX_WORKGROUP_SIZE`]);
//! - the explicit arguments are exactly those of [`KernelSpec::layout`]: the
//!   same count, and each at the same offset, of the same size and kind
//!   (`global_buffer` for a pointer, `by_value` for a scalar), with the same
//!   `.name` (the AMD build passes `-Zfewer-names=no` so that rustc keeps the
//!   parameter names the metadata carries), all within the kernarg segment.

use kernels_device::args::{ArgKind, KernelSpec};

use crate::{ArgInfo, CodeObject, KERNEL_DESCRIPTOR_SIZE, launch};

/// A kernel as the host expects it to be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedKernel<'a> {
    pub name: &'a str,
    /// The explicit arguments, in order.
    pub args: Vec<ExpectedArg<'a>>,
    /// The largest workgroup it is launched with.
    pub max_workgroup_size: u32,
}

/// An explicit kernel argument as the host expects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedArg<'a> {
    /// The parameter's name, which the metadata's `.name` must be.
    pub name: &'a str,
    pub offset: u32,
    pub size: u32,
    /// A pointer (`global_buffer`) rather than a scalar (`by_value`).
    pub pointer: bool,
}

/// The metadata a kernel must have for the launcher of `spec` to be right:
/// its explicit arguments at the offsets and sizes of the packed argument buffer.
pub fn expected_kernel(spec: &KernelSpec) -> ExpectedKernel<'_> {
    let (offsets, _) = spec.layout();
    let args = spec
        .params
        .iter()
        .zip(offsets)
        .map(|(p, offset)| ExpectedArg {
            name: p.name,
            offset: offset as u32,
            size: p.kind.size() as u32,
            pointer: p.kind == ArgKind::Ptr,
        })
        .collect();
    ExpectedKernel { name: spec.name, args, max_workgroup_size: launch::max_workgroup_size(spec.name) }
}

/// Audits `object` for every kernel in `specs` (see the module documentation
/// for the rules). Returns every problem found, each naming the kernel and what differs.
pub fn audit_against_kernels(object: &CodeObject, specs: &[KernelSpec]) -> Result<(), Vec<String>> {
    let expected: Vec<ExpectedKernel> = specs.iter().map(expected_kernel).collect();
    object.audit(&expected)
}

impl CodeObject {
    /// Checks every expected kernel against the rules of this module.
    /// Returns every problem found, each naming the kernel and what differs.
    pub fn audit(&self, expected: &[ExpectedKernel]) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if !self.undefined_symbols.is_empty() {
            problems.push(format!(
                "the code object references undefined symbols {:?}; `mlxcel_kernel_may_panic` means a kernel \
                 still has a panic path (an index check, a division by zero, an unwrap): remove it",
                self.undefined_symbols
            ));
        }
        for exp in expected {
            let name = exp.name;
            let Some(k) = self.kernel(name) else {
                let present: Vec<&str> = self.kernels.iter().map(|k| k.name.as_str()).collect();
                problems.push(format!(
                    "kernel `{name}`: not in the code object (it has: {})",
                    if present.is_empty() { "no kernels".to_string() } else { present.join(", ") }
                ));
                continue;
            };
            let mut problem = |msg: String| problems.push(format!("kernel `{name}`: {msg}"));
            if let Some(m) = k.float_modes
                && !m.is_ieee_exact()
            {
                problem(format!(
                    "floating-point modes {m:?}; the contracts need round to nearest even (0) \
                     and denormals preserved (3)"
                ));
            }
            if !k.has_descriptor_symbol {
                problem(format!("no {KERNEL_DESCRIPTOR_SIZE}-byte kernel descriptor symbol `{}`", k.symbol));
            }
            if k.wavefront_size != 32 {
                problem(format!("wavefront size is {}, expected 32", k.wavefront_size));
            }
            if k.private_segment_fixed_size != 0 {
                problem(format!(
                    "uses {} bytes of scratch (private segment) per work-item, expected 0",
                    k.private_segment_fixed_size
                ));
            }
            if k.uses_dynamic_stack {
                problem("uses a dynamic stack".to_string());
            }
            // Workgroup memory is sized at launch only: the host's availability
            // bound (the most a launch asks for) counts no static LDS.
            if k.group_segment_fixed_size != 0 {
                problem(format!(
                    "uses {} bytes of static LDS, expected 0 (workgroup memory is sized at launch)",
                    k.group_segment_fixed_size
                ));
            }
            if k.sgpr_spill_count != 0 {
                problem(format!("spills {} SGPRs", k.sgpr_spill_count));
            }
            if k.vgpr_spill_count != 0 {
                problem(format!("spills {} VGPRs", k.vgpr_spill_count));
            }
            if let Some(bound) = launch::amdgpu_launch_bound(exp.name)
                && k.max_flat_workgroup_size != bound
            {
                problem(format!(
                    ".max_flat_workgroup_size is {}, not its launch bound {bound} (geometry::AMDGPU_LAUNCH_BOUNDS)",
                    k.max_flat_workgroup_size
                ));
            }
            if k.max_flat_workgroup_size < exp.max_workgroup_size {
                problem(format!(
                    ".max_flat_workgroup_size is {}, less than the {} threads a launcher may use",
                    k.max_flat_workgroup_size, exp.max_workgroup_size
                ));
            }
            audit_args(k.args.iter().filter(|a| !a.is_hidden()).collect(), exp, k.kernarg_segment_size, &mut problem);
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }
}

/// The explicit arguments `explicit` against `exp`, by position.
fn audit_args(explicit: Vec<&ArgInfo>, exp: &ExpectedKernel, kernarg_size: u32, problem: &mut impl FnMut(String)) {
    if explicit.len() != exp.args.len() {
        problem(format!("has {} explicit args, expected {}", explicit.len(), exp.args.len()));
    }
    for (i, (got, want)) in explicit.iter().zip(&exp.args).enumerate() {
        let kind = if want.pointer { "global_buffer" } else { "by_value" };
        let what = format!("arg {i} (`{}`)", want.name);
        match got.name.as_deref() {
            Some(n) if n == want.name => {}
            Some(n) => problem(format!("{what}: named `{n}` in the metadata")),
            None => problem(format!(
                "{what}: has no .name in the metadata (the AMD build passes -Zfewer-names=no to keep them)"
            )),
        }
        if got.offset != want.offset {
            problem(format!("{what}: offset {}, expected {}", got.offset, want.offset));
        }
        if got.size != want.size {
            problem(format!("{what}: size {}, expected {}", got.size, want.size));
        }
        if got.value_kind != kind {
            problem(format!("{what}: value_kind `{}`, expected `{kind}`", got.value_kind));
        }
    }
    for (i, want) in exp.args.iter().enumerate().skip(explicit.len()) {
        problem(format!("arg {i} (`{}`, offset {}, size {}) is missing", want.name, want.offset, want.size));
    }
    for (i, got) in explicit.iter().enumerate().skip(exp.args.len()) {
        problem(format!(
            "unexpected arg {i} (offset {}, size {}, value_kind `{}`)",
            got.offset, got.size, got.value_kind
        ));
    }
    let end = explicit.iter().map(|a| u64::from(a.offset) + u64::from(a.size)).max();
    if let Some(end) = end
        && end > u64::from(kernarg_size)
    {
        problem(format!("explicit args end at byte {end}, past the kernarg segment size {kernarg_size}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Elf, Mp, arg, encode, kernel_map, metadata_with, named_arg, probe_elf};
    use kernels_device::args::Param;
    use kernels_device::entry::KERNELS;
    use object::elf;

    fn probe_expected() -> Vec<ExpectedKernel<'static>> {
        vec![ExpectedKernel {
            name: "probe",
            args: vec![
                ExpectedArg { name: "out", offset: 0, size: 8, pointer: true },
                ExpectedArg { name: "n", offset: 8, size: 4, pointer: false },
            ],
            max_workgroup_size: launch::MAX_WORKGROUP_SIZE,
        }]
    }

    /// A code object with one kernel whose metadata is what `spec`'s launcher packs.
    fn object_for(spec: &KernelSpec) -> CodeObject {
        let (offsets, end) = spec.layout();
        let mut args: Vec<Mp> = spec
            .params
            .iter()
            .zip(offsets)
            .map(|(p, off)| {
                let kind = if p.kind == ArgKind::Ptr { "global_buffer" } else { "by_value" };
                named_arg(p.name, off as u64, p.kind.size() as u64, kind)
            })
            .collect();
        let hidden = end.next_multiple_of(8) as u64;
        args.push(arg(hidden, 4, "hidden_block_count_x"));
        let symbol: &'static str = format!("{}.kd", spec.name).leak();
        let mut kernel = kernel_map(spec.name, symbol, args);
        // What the build gives it: its launch bound, else LLVM's default of 1024.
        for (key, v) in kernel.iter_mut() {
            if *key == ".max_flat_workgroup_size" {
                *v = Mp::U(u64::from(launch::amdgpu_launch_bound(spec.name).unwrap_or(1024)));
            }
        }
        let mut elf = Elf::probe(encode(&metadata_with(vec![kernel]), false));
        elf.symbols = vec![(spec.name, elf::STT_FUNC, 756), (symbol, elf::STT_OBJECT, 64)];
        CodeObject::parse(&elf.build()).unwrap()
    }

    #[test]
    fn the_probe_passes() {
        let co = CodeObject::parse(&probe_elf()).unwrap();
        assert_eq!(co.audit(&probe_expected()), Ok(()));
    }

    #[test]
    fn every_kernel_spec_passes_against_its_own_layout() {
        for spec in KERNELS {
            assert_eq!(audit_against_kernels(&object_for(spec), std::slice::from_ref(spec)), Ok(()), "{}", spec.name);
        }
    }

    #[test]
    fn swapping_two_same_typed_parameter_names_fails_the_audit() {
        let spec = kernels_device::entry::spec("xielu_f32").unwrap();
        let co = object_for(spec);
        // alpha_p and alpha_n: both f32, so offsets, sizes and kinds stay the same.
        let mut params: Vec<Param> = spec.params.to_vec();
        let p = params.iter().position(|p| p.name == "alpha_p").unwrap();
        let n = params.iter().position(|p| p.name == "alpha_n").unwrap();
        assert_eq!(params[p].kind, params[n].kind);
        params.swap(p, n);
        let swapped = KernelSpec { params: params.leak(), ..*spec };
        assert_eq!(expected_kernel(spec).args.len(), expected_kernel(&swapped).args.len());
        let problems = audit_against_kernels(&co, &[swapped]).unwrap_err();
        assert_eq!(
            problems,
            [
                format!("kernel `xielu_f32`: arg {p} (`alpha_n`): named `alpha_p` in the metadata"),
                format!("kernel `xielu_f32`: arg {n} (`alpha_p`): named `alpha_n` in the metadata"),
            ]
        );
        // The same with two pointers (x and out).
        let mut params: Vec<Param> = spec.params.to_vec();
        params.swap(0, 1);
        let problems = audit_against_kernels(&co, &[KernelSpec { params: params.leak(), ..*spec }]);
        assert_eq!(problems.unwrap_err().len(), 2);
    }

    #[test]
    fn unnamed_arguments_fail_the_audit() {
        let args = vec![named_arg("out", 0, 8, "global_buffer"), arg(8, 4, "by_value")];
        let elf = Elf::probe(encode(&metadata_with(vec![kernel_map("probe", "probe.kd", args)]), false));
        let problems = CodeObject::parse(&elf.build()).unwrap().audit(&probe_expected()).unwrap_err();
        assert_eq!(
            problems,
            [
                "kernel `probe`: arg 1 (`n`): has no .name in the metadata (the AMD build passes -Zfewer-names=no to keep them)"
            ]
        );
    }

    #[test]
    fn a_kernel_built_without_its_launch_bound_fails_the_audit() {
        // testutil's metadata says 1024, LLVM's default; the bound is 64.
        let (name, bound) = kernels_device::geometry::AMDGPU_LAUNCH_BOUNDS[0];
        let k = kernel_map(name, "probe.kd", crate::testutil::probe_args());
        let co = CodeObject::parse(&Elf::probe(encode(&metadata_with(vec![k]), false)).build()).unwrap();
        let expected = ExpectedKernel { name, ..probe_expected().remove(0) };
        let problems = co.audit(&[expected]).unwrap_err();
        let want = format!(
            "kernel `{name}`: .max_flat_workgroup_size is 1024, not its launch bound {bound} (geometry::AMDGPU_LAUNCH_BOUNDS)"
        );
        assert!(problems.contains(&want), "{problems:?}");
    }

    #[test]
    fn a_small_max_flat_workgroup_size_fails_the_audit() {
        let mut k = kernel_map("probe", "probe.kd", crate::testutil::probe_args());
        for (key, v) in k.iter_mut() {
            if *key == ".max_flat_workgroup_size" {
                *v = Mp::U(u64::from(launch::MAX_WORKGROUP_SIZE) - 32);
            }
        }
        let co = CodeObject::parse(&Elf::probe(encode(&metadata_with(vec![k]), false)).build()).unwrap();
        let problems = co.audit(&probe_expected()).unwrap_err();
        assert_eq!(
            problems,
            [format!(
                "kernel `probe`: .max_flat_workgroup_size is {}, less than the {} threads a launcher may use",
                launch::MAX_WORKGROUP_SIZE - 32,
                launch::MAX_WORKGROUP_SIZE
            )]
        );
    }

    #[test]
    fn undefined_symbols_fail_the_audit() {
        let mut elf = Elf::probe(encode(
            &metadata_with(vec![kernel_map("probe", "probe.kd", crate::testutil::probe_args())]),
            false,
        ));
        elf.undefined = vec!["mlxcel_kernel_may_panic"];
        let problems = CodeObject::parse(&elf.build()).unwrap().audit(&probe_expected()).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("undefined symbols [\"mlxcel_kernel_may_panic\"]"), "{problems:?}");
    }

    #[test]
    fn flushed_float_modes_fail_the_audit() {
        let mut co = CodeObject::parse(&probe_elf()).unwrap();
        co.kernels[0].float_modes =
            Some(crate::FloatModes { round_32: 0, round_16_64: 0, denorm_32: 0, denorm_16_64: 3 });
        let problems = co.audit(&probe_expected()).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("kernel `probe`: floating-point modes"), "{problems:?}");
    }

    #[test]
    fn audit_reports_every_problem() {
        let args = vec![named_arg("out", 0, 4, "by_value"), named_arg("n", 8, 8, "global_buffer")];
        let mut k = kernel_map("probe", "probe.kd", args);
        for (key, v) in k.iter_mut() {
            match *key {
                ".wavefront_size" => *v = Mp::U(64),
                ".private_segment_fixed_size" => *v = Mp::U(16),
                ".uses_dynamic_stack" => *v = Mp::B(true),
                ".group_segment_fixed_size" => *v = Mp::U(256),
                ".sgpr_spill_count" => *v = Mp::U(2),
                ".vgpr_spill_count" => *v = Mp::U(3),
                ".kernarg_segment_size" => *v = Mp::U(8),
                _ => {}
            }
        }
        let mut elf = Elf::probe(encode(&metadata_with(vec![k]), false));
        elf.symbols = vec![("probe", elf::STT_FUNC, 756), ("probe.kd", elf::STT_OBJECT, 32)];
        let co = CodeObject::parse(&elf.build()).unwrap();
        let mut expected = probe_expected();
        expected.push(ExpectedKernel { name: "missing", args: vec![], max_workgroup_size: 1 });
        let problems = co.audit(&expected).unwrap_err();
        let want = [
            "kernel `probe`: no 64-byte kernel descriptor symbol `probe.kd`",
            "kernel `probe`: wavefront size is 64, expected 32",
            "kernel `probe`: uses 16 bytes of scratch (private segment) per work-item, expected 0",
            "kernel `probe`: uses a dynamic stack",
            "kernel `probe`: uses 256 bytes of static LDS, expected 0 (workgroup memory is sized at launch)",
            "kernel `probe`: spills 2 SGPRs",
            "kernel `probe`: spills 3 VGPRs",
            "kernel `probe`: arg 0 (`out`): size 4, expected 8",
            "kernel `probe`: arg 0 (`out`): value_kind `by_value`, expected `global_buffer`",
            "kernel `probe`: arg 1 (`n`): size 8, expected 4",
            "kernel `probe`: arg 1 (`n`): value_kind `global_buffer`, expected `by_value`",
            "kernel `probe`: explicit args end at byte 16, past the kernarg segment size 8",
            "kernel `missing`: not in the code object (it has: probe)",
        ];
        assert_eq!(problems, want);

        let co = CodeObject::parse(&probe_elf()).unwrap();
        let one = |args: Vec<ExpectedArg<'static>>| {
            co.audit(&[ExpectedKernel { name: "probe", args, max_workgroup_size: 64 }]).unwrap_err()
        };
        assert_eq!(
            one(vec![ExpectedArg { name: "out", offset: 4, size: 8, pointer: true }]),
            [
                "kernel `probe`: has 2 explicit args, expected 1",
                "kernel `probe`: arg 0 (`out`): offset 0, expected 4",
                "kernel `probe`: unexpected arg 1 (offset 8, size 4, value_kind `by_value`)",
            ]
        );
        assert_eq!(
            one(vec![
                ExpectedArg { name: "out", offset: 0, size: 8, pointer: true },
                ExpectedArg { name: "n", offset: 8, size: 4, pointer: false },
                ExpectedArg { name: "m", offset: 12, size: 4, pointer: false },
            ]),
            [
                "kernel `probe`: has 2 explicit args, expected 3",
                "kernel `probe`: arg 2 (`m`, offset 12, size 4) is missing",
            ]
        );
    }

    #[test]
    fn no_kernels_at_all() {
        let co = CodeObject::parse(&Elf::probe(encode(&metadata_with(vec![]), false)).build()).unwrap();
        let problems = co.audit(&probe_expected()).unwrap_err();
        assert_eq!(problems, ["kernel `probe`: not in the code object (it has: no kernels)"]);
    }
}
