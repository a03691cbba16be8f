//! Launchers: one module per kernel family. Each validates every argument
//! before it touches the device, finds the kernel for the dtype with
//! [`Device::kernel`] (the same lookup as the availability predicates, so the
//! two cannot disagree), and launches on the caller's stream.
//!
//! Both forms of a launch come from the family's declaration in
//! `kernels_device::entry`:
//! - the raw form, the family's argument struct (`XieluArgs`: device
//!   addresses and scalars), which the C ABI uses: `launch(device, dtype,
//!   args, stream)` and its kin are `unsafe`, the caller guaranteeing that the
//!   buffers hold the sizes the arguments describe;
//! - the typed form (`XieluLaunch<T>`: `&DeviceBuffer<E>` for a buffer the
//!   kernel reads, `&mut DeviceBuffer<E>` for one it writes, and the scalars),
//!   which [`Run::run`] launches safely, checking every buffer's size too.
//!
//! The pointer checks are not written per launcher: they come from the
//! declaration (see [`check_buffers`]). Values, extents and buffer sizes are
//! positional, in the kernel's signature order, as the declaration derives
//! them; the unit tests check every family's order and kinds against its
//! kernels once.

use kernels_device::args::{ArgValue, BufferExtent, KernelSpec, MAX_PARAMS};

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::runtime::{Device, Kernel, LaunchDims, Stream};

/// The kernel symbol of `base` for `dtype`: `xielu_bf16`.
pub fn symbol(base: &str, dtype: Dtype) -> String {
    format!("{base}_{}", dtype.name())
}

/// The kernel `base` for `dtype` on `device`, through the lookup the availability
/// predicates use, so a launch fails exactly when its predicate says false.
pub(crate) fn kernel_for(device: &Device, base: &str, dtype: Dtype) -> Result<Kernel> {
    device.kernel_of(base, dtype)
}

/// The bytes each buffer of a safe launch holds, in the kernel's signature
/// order (`None`: a scalar, or not known); empty for a raw launch.
pub(crate) type Capacity<'a> = &'a [Option<usize>];

/// A typed launch struct (`XieluLaunch` and its kin): launched safely.
pub trait Run {
    /// Checks every argument, every buffer against its extent and the bytes
    /// it holds, and enqueues the launch on `stream` (nothing where there is
    /// nothing to do).
    fn run(self, device: &Device, stream: Stream) -> Result<()>;
}

/// [`Run`] for a family's typed struct over [`crate::runtime::Typed`]
/// buffers: its raw form, with the buffers' sizes, for `T`'s dtype.
macro_rules! typed_run {
    ($($typed:ident),+ $(,)?) => {$(
        impl<T: crate::dtype::Element> crate::kernels::Run for $typed<'_, T, crate::runtime::Typed> {
            fn run(self, device: &Device, stream: Stream) -> Result<()> {
                let (args, capacity) = self.raw();
                crate::kernels::CheckedArgs::enqueue_checked(args, device, T::DTYPE, &capacity, stream)
            }
        }
    )+};
}

/// A kernel family's arguments, checked and enqueued by its module.
pub(crate) trait CheckedArgs {
    /// Checks the arguments (scalars, shape, then the pointers against the
    /// declaration and `capacity`) and enqueues the instance for `dtype`;
    /// nothing is enqueued where there is nothing to do.
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()>;
}

pub mod add3_layer_norm;
pub mod mamba1_scan;
pub mod moe;
pub mod xielu;

/// One pointer argument's checked byte range: `spec.params[param]`'s.
#[derive(Clone, Copy)]
struct Range {
    param: usize,
    start: u64,
    end: u64,
}

/// Checks every pointer of a launch against its kernel's declaration:
/// - a pointer through which the launch touches no element is not checked (a
///   launch of nothing may pass null);
/// - otherwise it is non-null (unless the declaration allows null), aligned to
///   its element, its extent in bytes fits in 64 bits without wrapping the
///   address, and, for the safe wrappers, fits in the buffer (`capacity`);
/// - no two ranges overlap where one of them is written, except an exact
///   equality the declaration allows (an in-place launch).
pub(crate) fn check_buffers(spec: &KernelSpec, extents: &[Option<BufferExtent>], capacity: Capacity) -> Result<()> {
    if spec.params.len() > MAX_PARAMS {
        return Err(Error::Internal(format!("kernel {} takes more than MAX_PARAMS arguments", spec.name)));
    }
    // A fixed array, not a Vec: this runs on every launch.
    let (mut ranges, mut count) = ([Range { param: 0, start: 0, end: 0 }; MAX_PARAMS], 0);
    if extents.len() != spec.params.len() || !(capacity.is_empty() || capacity.len() == spec.params.len()) {
        return Err(Error::Internal(format!(
            "kernel {} takes {} arguments, the launcher gave {} extents and {} buffer sizes",
            spec.name,
            spec.params.len(),
            extents.len(),
            capacity.len()
        )));
    }
    for (index, (param, extent)) in spec.params.iter().zip(extents).enumerate() {
        let Some(extent) = extent else { continue };
        let name = param.name;
        let elem = param.elem_bytes as u64;
        let bytes = extent.elems.and_then(|n| n.checked_mul(elem)).ok_or_else(|| {
            Error::invalid(name, format!("its extent of {:?} {} elements overflows 64 bits", extent.elems, param.elem))
        })?;
        if bytes == 0 {
            continue;
        }
        let ptr = extent.ptr;
        if ptr == 0 {
            if param.nullable {
                continue;
            }
            return Err(Error::invalid(name, "is a null pointer"));
        }
        if !ptr.is_multiple_of(elem) {
            return Err(Error::invalid(
                name,
                format!("pointer {ptr:#x} is not aligned to its {} element ({elem} bytes)", param.elem),
            ));
        }
        let end = ptr.checked_add(bytes).ok_or_else(|| {
            Error::invalid(name, format!("pointer {ptr:#x} plus its {bytes} bytes wraps the address space"))
        })?;
        if let Some(&Some(held)) = capacity.get(index)
            && (held as u64) < bytes
        {
            return Err(Error::invalid(
                name,
                format!("holds {held} bytes, needs {bytes} ({} {} elements)", bytes / elem, param.elem),
            ));
        }
        ranges[count] = Range { param: index, start: ptr, end };
        count += 1;
    }
    let ranges = &ranges[..count];
    for (i, a) in ranges.iter().enumerate() {
        for b in &ranges[i + 1..] {
            let (pa, pb) = (&spec.params[a.param], &spec.params[b.param]);
            let writes = |p: &kernels_device::args::Param| p.access == kernels_device::args::Access::Write;
            if !overlaps((a.start, a.end), (b.start, b.end)) || !(writes(pa) || writes(pb)) {
                continue;
            }
            let exact = a.start == b.start && a.end == b.end;
            if exact && (pa.may_equal.contains(&pb.name) || pb.may_equal.contains(&pa.name)) {
                continue;
            }
            let allowed = |p: &kernels_device::args::Param| {
                if p.may_equal.is_empty() {
                    format!("`{}` may alias nothing", p.name)
                } else {
                    format!("`{}` may only be exactly `{}`", p.name, p.may_equal.join("` or `"))
                }
            };
            return Err(Error::invalid(
                pb.name,
                format!(
                    "[{:#x}, {:#x}) overlaps `{}` [{:#x}, {:#x}); {}, {}",
                    b.start,
                    b.end,
                    pa.name,
                    a.start,
                    a.end,
                    allowed(pb),
                    allowed(pa)
                ),
            ));
        }
    }
    Ok(())
}

/// Whether the byte ranges `[a.0, a.1)` and `[b.0, b.1)` share a byte.
fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The first pointer argument of a launch that [`check_buffers`] accepted,
/// other than those named in `except`, whose bytes overlap `range`: for a
/// buffer a launcher splits among several launches (the MoE scratch).
pub(crate) fn overlapping(
    spec: &KernelSpec,
    extents: &[Option<BufferExtent>],
    range: (u64, u64),
    except: &[&str],
) -> Option<&'static str> {
    spec.params.iter().zip(extents).find_map(|(param, extent)| {
        let e = extent.as_ref().filter(|e| e.ptr != 0 && !except.contains(&param.name))?;
        // check_buffers refused an extent whose size overflows or wraps.
        let bytes = e.elems?.checked_mul(param.elem_bytes as u64)?;
        (bytes != 0 && overlaps(range, (e.ptr, e.ptr.saturating_add(bytes)))).then_some(param.name)
    })
}

/// Checks a launch's pointers against the declaration ([`check_buffers`]) and
/// enqueues it.
///
/// # Safety
/// Every pointer in `values` is valid for everything the kernel does with it.
pub(crate) unsafe fn enqueue(
    device: &Device,
    kernel: &Kernel,
    dims: LaunchDims,
    values: &[ArgValue],
    extents: &[Option<BufferExtent>],
    capacity: Capacity,
    stream: Stream,
) -> Result<()> {
    check_buffers(kernel.spec, extents, capacity)?;
    unsafe { device.launch(kernel, dims, values, stream) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_device::entry::{Add3LayerNormArgs, XieluArgs, add3_layer_norm_bf16, xielu_f32};

    fn xielu(x: u64, out: u64, n: u64) -> Result<()> {
        let args = XieluArgs { x, out, n, alpha_p: 1.0, alpha_n: 1.0, beta: 0.5, eps: -1e-6 };
        check_buffers(&xielu_f32::SPEC, &args.extents(), &[])
    }

    /// A kernel's bound on workgroup memory, as its family declares it.
    fn most_workgroup_mem(name: &str) -> Option<u32> {
        kernels_device::entry::spec(name).map(|spec| spec.most_workgroup_mem_bytes)
    }

    /// Every kernel's bound fits in a workgroup's 64 KiB, and the bounds are
    /// those of the launchers' geometry.
    #[test]
    fn every_kernel_has_its_most_workgroup_mem() {
        for spec in kernels_device::entry::KERNELS {
            assert!(spec.most_workgroup_mem_bytes <= 64 * 1024, "{}", spec.name);
        }
        assert_eq!(most_workgroup_mem("moe_down_bf16"), Some(61_968));
        assert_eq!(most_workgroup_mem("moe_down6_f16"), Some(61_968));
        assert_eq!(most_workgroup_mem("xielu_f16"), Some(61_440));
        assert_eq!(most_workgroup_mem("xielu_bf16"), Some(16_384));
        assert_eq!(most_workgroup_mem("xielu_f32"), Some(0));
        assert_eq!(most_workgroup_mem("add3_layer_norm_d4096_f16"), most_workgroup_mem("add3_layer_norm_f16"));
        assert_eq!(most_workgroup_mem("xielu_f64"), None);
    }

    /// No launcher asks for more than its kernel's bound, and each bound is
    /// reached by some launch.
    #[test]
    fn launchers_stay_within_their_bounds() {
        use kernels_device::geometry::moe::{BITS, GROUP_SIZES, MAX_COLS};
        let mut reached = std::collections::HashMap::new();
        let mut see = |name: String, dims: crate::runtime::LaunchDims| {
            let most = most_workgroup_mem(&name).unwrap();
            assert!(dims.workgroup_mem_bytes <= most, "{name}: {} > {most}", dims.workgroup_mem_bytes);
            let r = reached.entry(name).or_insert(0);
            *r = (*r).max(dims.workgroup_mem_bytes);
        };
        for dtype in Dtype::ALL {
            for n in [1u64, 1000, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 30] {
                for cus in [1, 16, 40, 132] {
                    see(symbol("xielu", dtype), xielu::dims(n, dtype, cus));
                }
            }
            for rows in [1, 8192] {
                see(symbol("add3_layer_norm", dtype), add3_layer_norm::dims(rows));
                see(symbol("add3_layer_norm_d4096", dtype), add3_layer_norm::dims(rows));
            }
            for mapping in kernels_device::geometry::mamba1_scan::Mapping::ALL {
                see(symbol("mamba1_scan", dtype), mamba1_scan::dims(mapping, 1, 5120, 16));
            }
            for bits in BITS {
                for cols in [GROUP_SIZES[2], 2688, 4096, MAX_COLS] {
                    let shape =
                        moe::MoeShape { n_experts: 8, k: 6, din: cols, dff: cols, bits, group_size: GROUP_SIZES[2] };
                    see(symbol("moe_fc1_relu2", dtype), moe::fc1_dims(&shape));
                    see(symbol("moe_down", dtype), moe::down_dims(&shape));
                    see(symbol("moe_combine", dtype), moe::combine_dims(cols));
                    see(symbol("moe_gateup_batch", dtype), moe::gateup_batch_dims(&shape, 8));
                    for routed in moe::block::GATEUP_ROUTED_KERNELS {
                        see(symbol(routed, dtype), moe::gateup_batch_dims(&shape, 8));
                    }
                    see(symbol("moe_down_batch", dtype), moe::down_batch_dims(&shape, 8));
                    see(symbol("moe_combine_batch", dtype), moe::combine_batch_dims(cols, 8));
                }
            }
            for n_experts in [1, 128, 512, kernels_device::geometry::moe_router::MAX_EXPERTS] {
                see(symbol("moe_router_logits", dtype), moe::router::logits_dims(n_experts));
                see("moe_topk".to_string(), moe::router::topk_dims(8));
            }
        }
        for (name, most) in reached {
            assert_eq!(Some(most), most_workgroup_mem(&name), "{name}: the bound is never reached");
        }
    }

    /// Every family's values are packed in its kernels' order, each of the
    /// kind the kernel takes, and every kernel belongs to one family: the
    /// positional packing and extents need no names at launch.
    #[test]
    fn every_family_packs_its_kernels_parameters_in_order() {
        use kernels_device::args::ArgKind;
        use kernels_device::entry::*;
        let mut seen = Vec::new();
        // `extents()` is an array of `ARITY` entries, as `values()` is.
        let mut check = |instances: &[&'static str], kinds: &[ArgKind], arity: usize| {
            for &name in instances {
                let spec = kernels_device::entry::spec(name).unwrap();
                let declared: Vec<ArgKind> = spec.params.iter().map(|p| p.kind).collect();
                assert_eq!(declared, kinds, "{name}");
                assert_eq!(arity, spec.params.len(), "{name}");
                seen.push(name);
            }
        };
        macro_rules! families {
            ($($args:ident),+ $(,)?) => {$(
                check(
                    $args::INSTANCES,
                    &$args::default().values().map(|v| v.kind()),
                    $args::ARITY,
                );
            )+};
        }
        families!(
            ProbeArgs,
            EmptyArgs,
            ReadStreamArgs,
            XieluArgs,
            Add3LayerNormArgs,
            MoeFc1Relu2Args,
            MoeGateUpArgs,
            MoeDownArgs,
            MoeCombineArgs,
            MoeGateUpBatchArgs,
            MoeGateUpRoutedArgs,
            MoeDownBatchArgs,
            MoeDownCombineArgs,
            MoeCombineBatchArgs,
            MoeRouterLogitsArgs,
            MoeRouterLogitsQArgs,
            MoeTopKArgs,
            Mamba1ScanArgs,
        );
        for spec in KERNELS {
            assert_eq!(seen.iter().filter(|&&n| n == spec.name).count(), 1, "{}", spec.name);
        }
    }

    /// The typed form gives the raw form and each buffer's size in the
    /// kernel's order: the scalars and an absent nullable buffer have none.
    #[test]
    fn a_typed_launch_gives_its_raw_form_and_buffer_sizes() {
        use crate::runtime::Spans;
        use kernels_device::entry::{Add3LayerNorm, MoeCombine};
        let (args, held) = Add3LayerNorm::<f32, Spans> {
            a: (0x1000, 10),
            b: (0x2000, 20),
            x: (0x3000, 30),
            w: (0x4000, 40),
            bias: None,
            x_new: (0x5000, 50),
            h: (0x6000, 60),
            rows: 2,
            d: 8,
            eps: 1e-5,
        }
        .raw();
        let want = Add3LayerNormArgs {
            a: 0x1000,
            b: 0x2000,
            x: 0x3000,
            w: 0x4000,
            bias: 0,
            x_new: 0x5000,
            h: 0x6000,
            rows: 2,
            d: 8,
            eps: 1e-5,
        };
        assert_eq!(args, want);
        assert_eq!(held, [Some(10), Some(20), Some(30), Some(40), None, Some(50), Some(60), None, None, None]);
        let (args, held) = MoeCombine::<f32, Spans> { part: (0x100, 4), out: (0x200, 8), k: 1, din: 2 }.raw();
        assert_eq!((args.part, args.out, args.k, args.din), (0x100, 0x200, 1, 2));
        assert_eq!(held, [Some(4), Some(8), None, None]);
    }

    #[test]
    fn xielu_allows_exactly_in_place_and_refuses_a_partial_overlap() {
        xielu(0x1000, 0x1000, 64).unwrap();
        xielu(0x1000, 0x2000, 1024).unwrap();
        let err = xielu(0x1000, 0x1004, 64).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { argument: "out", message } if message.contains("`x`")),
            "{err}"
        );
    }

    #[test]
    fn null_misaligned_and_wrapping_pointers_are_named() {
        assert!(matches!(xielu(0, 0x1000, 4), Err(Error::InvalidArgument { argument: "x", .. })));
        assert!(matches!(xielu(0x1002, 0x2000, 4), Err(Error::InvalidArgument { argument: "x", .. })));
        assert!(matches!(xielu(u64::MAX - 3, 0x2000, 4), Err(Error::InvalidArgument { argument: "x", .. })));
        assert!(matches!(xielu(0x1000, 0x2000, u64::MAX), Err(Error::InvalidArgument { argument: "x", .. })));
        // Nothing to touch: nothing checked.
        xielu(0, 0, 0).unwrap();
    }

    fn add3(a: u64, b: u64, x: u64, x_new: u64, h: u64) -> Result<()> {
        let args = Add3LayerNormArgs { a, b, x, w: 0x9000, bias: 0, x_new, h, rows: 4, d: 64, eps: 1e-5 };
        check_buffers(&add3_layer_norm_bf16::SPEC, &args.extents(), &[])
    }

    #[test]
    fn add3_outputs_may_be_exactly_a_row_input_but_not_each_other() {
        let (a, b, x, p, q) = (0x10000, 0x20000, 0x30000, 0x40000, 0x50000);
        add3(a, b, x, p, q).unwrap();
        add3(a, b, x, a, b).unwrap();
        add3(a, b, x, x, a).unwrap();
        // Inputs may overlap each other: both are only read.
        add3(a, a, a, p, q).unwrap();
        assert!(matches!(add3(a, b, x, p, p), Err(Error::InvalidArgument { argument: "h", .. })));
        assert!(matches!(add3(a, b, x, a + 2, q), Err(Error::InvalidArgument { argument: "x_new", .. })));
    }

    #[test]
    fn a_buffer_too_small_for_its_extent_is_refused() {
        let args = XieluArgs { x: 0x1000, out: 0x2000, n: 10, alpha_p: 1.0, alpha_n: 1.0, beta: 0.5, eps: -1e-6 };
        let capacity = [Some(40), Some(36), None, None, None, None, None];
        let err = check_buffers(&xielu_f32::SPEC, &args.extents(), &capacity).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { argument: "out", message } if message.contains("holds 36 bytes, needs 40")),
            "{err}"
        );
    }
}
