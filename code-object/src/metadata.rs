//! The AMDGPU metadata decoder: the `NT_AMDGPU_METADATA` note (a MessagePack
//! map, see LLVM AMDGPUUsage, "Code Object V3+ Metadata") decoded into typed
//! kernel descriptors, and the floating-point modes of a kernel descriptor.
//!
//! Malformed MessagePack, missing keys and out-of-range values give a
//! [`CodeObjectError`] that says what was wrong; nothing here panics on input.

use rmpv::Value;

use crate::{CodeObjectError, err};

/// Maximum nesting accepted in the metadata (the real map nests 5 deep).
const MAX_MSGPACK_DEPTH: usize = 32;

/// The decoded metadata map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// `amdhsa.version` (major, minor): (1, 0) = V3, (1, 1) = V4, (1, 2) = V5+.
    pub version: (u32, u32),
    /// `amdhsa.target`, e.g. `amdgcn-amd-amdhsa--gfx1151`; empty for a V3
    /// (metadata 1.0) object that has none.
    pub target: String,
    /// The kernels of `amdhsa.kernels`, in metadata order (with
    /// `has_descriptor_symbol` false and no `float_modes`: those come from the ELF).
    pub kernels: Vec<KernelInfo>,
}

/// One kernel of `amdhsa.kernels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// `.name`: the source-level kernel name (also its function symbol).
    pub name: String,
    /// `.symbol`: the kernel descriptor symbol, e.g. `probe.kd`.
    pub symbol: String,
    /// `.args`, explicit ones first, then the `hidden_*` ones.
    pub args: Vec<ArgInfo>,
    pub wavefront_size: u32,
    /// Static LDS in bytes.
    pub group_segment_fixed_size: u32,
    /// Scratch per work-item in bytes.
    pub private_segment_fixed_size: u32,
    /// `.uses_dynamic_stack` (false when absent).
    pub uses_dynamic_stack: bool,
    pub sgpr_count: u32,
    pub vgpr_count: u32,
    /// `.sgpr_spill_count` (0 when absent).
    pub sgpr_spill_count: u32,
    /// `.vgpr_spill_count` (0 when absent).
    pub vgpr_spill_count: u32,
    pub kernarg_segment_size: u32,
    pub kernarg_segment_align: u32,
    pub max_flat_workgroup_size: u32,
    /// Whether the symbol table defines `symbol` as a 64-byte object.
    pub has_descriptor_symbol: bool,
    /// The floating-point modes the kernel descriptor sets (`COMPUTE_PGM_RSRC1`),
    /// when the descriptor's bytes are in the file.
    pub float_modes: Option<FloatModes>,
    /// `.agpr_count` (0 when absent).
    pub agpr_count: u32,
    /// `.uniform_work_group_size`, when present.
    pub uniform_work_group_size: Option<bool>,
    /// `.dynamic_lds_size`, when present.
    pub dynamic_lds_size: Option<u32>,
}

/// One kernel argument of `.args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgInfo {
    /// `.name`, when the compiler emitted one (rustc does only with
    /// `-Zfewer-names=no`, which the AMD build passes).
    pub name: Option<String>,
    /// Byte offset in the kernarg segment.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// `.value_kind`: `global_buffer`, `by_value`, `hidden_block_count_x`, ...
    pub value_kind: String,
    /// `.address_space` (`global`, `generic`, ...), when present.
    pub address_space: Option<String>,
    /// `.actual_access` (`read_only`, `write_only`, `read_write`), when present.
    pub actual_access: Option<String>,
}

/// The floating-point modes of a kernel, from `COMPUTE_PGM_RSRC1` of its
/// descriptor (bits 12-19). The bit-exact contracts need round to nearest even
/// (0) and denormals kept, in and out (3), as on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloatModes {
    pub round_32: u8,
    pub round_16_64: u8,
    pub denorm_32: u8,
    pub denorm_16_64: u8,
}

impl FloatModes {
    /// Byte offset of `COMPUTE_PGM_RSRC1` in a kernel descriptor.
    const RSRC1_OFFSET: usize = 48;

    /// The modes set by a kernel descriptor's bytes (`None` if it is shorter than 52 bytes).
    pub fn from_descriptor(kd: &[u8]) -> Option<FloatModes> {
        let bytes: [u8; 4] = kd.get(Self::RSRC1_OFFSET..Self::RSRC1_OFFSET + 4)?.try_into().ok()?;
        let rsrc1 = u32::from_le_bytes(bytes);
        let field = |shift: u32| ((rsrc1 >> shift) & 3) as u8;
        Some(FloatModes { round_32: field(12), round_16_64: field(14), denorm_32: field(16), denorm_16_64: field(18) })
    }

    /// Round to nearest even and denormals preserved, for every precision.
    pub fn is_ieee_exact(&self) -> bool {
        self.round_32 == 0 && self.round_16_64 == 0 && self.denorm_32 == 3 && self.denorm_16_64 == 3
    }
}

impl ArgInfo {
    /// Whether this is an implicit argument appended by the compiler
    /// (`.value_kind` starting with `hidden_`).
    pub fn is_hidden(&self) -> bool {
        self.value_kind.starts_with("hidden_")
    }
}

/// Decodes the descriptor of a `NT_AMDGPU_METADATA` note.
pub fn decode(note: &[u8]) -> Result<Metadata, CodeObjectError> {
    let root = rmpv::decode::read_value_with_max_depth(&mut &note[..], MAX_MSGPACK_DEPTH)
        .map_err(|e| CodeObjectError(format!("NT_AMDGPU_METADATA is not valid MessagePack: {e}")))?;
    parse_metadata(&root)
}

fn parse_metadata(root: &Value) -> Result<Metadata, CodeObjectError> {
    let root = as_map(root, "the metadata root")?;

    let version =
        get(root, "amdhsa.version").ok_or_else(|| CodeObjectError("metadata has no amdhsa.version".into()))?;
    let version = match version.as_array().map(Vec::as_slice) {
        Some([major, minor, ..]) => (to_u32(major, "amdhsa.version[0]")?, to_u32(minor, "amdhsa.version[1]")?),
        _ => {
            return err(format!("amdhsa.version is {}, expected an array [major, minor]", describe(version)));
        }
    };

    // amdhsa.target appeared with code object V4 (metadata 1.1).
    let target = match get(root, "amdhsa.target") {
        Some(t) => to_string(t, "amdhsa.target")?,
        None if version < (1, 1) => String::new(),
        None => return err("metadata has no amdhsa.target"),
    };

    let kernels = match get(root, "amdhsa.kernels") {
        Some(v) => as_array(v, "amdhsa.kernels")?
            .iter()
            .enumerate()
            .map(|(i, k)| parse_kernel(i, k))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };

    Ok(Metadata { version, target, kernels })
}

fn parse_kernel(index: usize, value: &Value) -> Result<KernelInfo, CodeObjectError> {
    let map = as_map(value, &format!("amdhsa.kernels[{index}]"))?;
    let name = Fields { map, ctx: &format!("amdhsa.kernels[{index}]") }.required(".name", to_string)?;
    let ctx = format!("kernel `{name}`");
    let f = Fields { map, ctx: &ctx };
    let symbol = f.required(".symbol", to_string)?;
    let args = match get(map, ".args") {
        Some(v) => as_array(v, &format!("{ctx} .args"))?
            .iter()
            .enumerate()
            .map(|(i, a)| parse_arg(&ctx, i, a))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };

    Ok(KernelInfo {
        symbol,
        args,
        wavefront_size: f.required(".wavefront_size", to_u32)?,
        group_segment_fixed_size: f.required(".group_segment_fixed_size", to_u32)?,
        private_segment_fixed_size: f.required(".private_segment_fixed_size", to_u32)?,
        uses_dynamic_stack: f.optional(".uses_dynamic_stack", to_bool)?.unwrap_or(false),
        sgpr_count: f.required(".sgpr_count", to_u32)?,
        vgpr_count: f.required(".vgpr_count", to_u32)?,
        sgpr_spill_count: f.optional(".sgpr_spill_count", to_u32)?.unwrap_or(0),
        vgpr_spill_count: f.optional(".vgpr_spill_count", to_u32)?.unwrap_or(0),
        kernarg_segment_size: f.required(".kernarg_segment_size", to_u32)?,
        kernarg_segment_align: f.required(".kernarg_segment_align", to_u32)?,
        max_flat_workgroup_size: f.required(".max_flat_workgroup_size", to_u32)?,
        has_descriptor_symbol: false,
        float_modes: None,
        agpr_count: f.optional(".agpr_count", to_u32)?.unwrap_or(0),
        uniform_work_group_size: f.optional(".uniform_work_group_size", to_bool)?,
        dynamic_lds_size: f.optional(".dynamic_lds_size", to_u32)?,
        name,
    })
}

fn parse_arg(kernel: &str, index: usize, value: &Value) -> Result<ArgInfo, CodeObjectError> {
    let ctx = format!("{kernel} .args[{index}]");
    let map = as_map(value, &ctx)?;
    let f = Fields { map, ctx: &ctx };
    Ok(ArgInfo {
        name: f.optional(".name", to_string)?,
        offset: f.required(".offset", to_u32)?,
        size: f.required(".size", to_u32)?,
        value_kind: f.required(".value_kind", to_string)?,
        address_space: f.optional(".address_space", to_string)?,
        actual_access: f.optional(".actual_access", to_string)?,
    })
}

/// The fields of one metadata map; errors name a field as `{ctx} {key}`.
struct Fields<'a> {
    map: &'a [(Value, Value)],
    ctx: &'a str,
}

impl Fields<'_> {
    /// The field `key` converted by `to`, or `None` when it is absent.
    fn optional<T>(
        &self,
        key: &str,
        to: fn(&Value, &str) -> Result<T, CodeObjectError>,
    ) -> Result<Option<T>, CodeObjectError> {
        get(self.map, key).map(|v| to(v, &format!("{} {key}", self.ctx))).transpose()
    }

    /// The field `key` converted by `to`; an error when it is absent.
    fn required<T>(&self, key: &str, to: fn(&Value, &str) -> Result<T, CodeObjectError>) -> Result<T, CodeObjectError> {
        self.optional(key, to)?.map_or_else(|| err(format!("{} has no {key}", self.ctx)), Ok)
    }
}

/// The value of `key` in a MessagePack map (keys as strings, or as binary,
/// which some writers use for strings).
fn get<'v>(map: &'v [(Value, Value)], key: &str) -> Option<&'v Value> {
    map.iter()
        .find(|(k, _)| match k {
            Value::String(s) => s.as_bytes() == key.as_bytes(),
            Value::Binary(b) => b.as_slice() == key.as_bytes(),
            _ => false,
        })
        .map(|(_, v)| v)
}

fn as_array<'v>(value: &'v Value, what: &str) -> Result<&'v [Value], CodeObjectError> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| CodeObjectError(format!("{what} is {}, expected an array", describe(value))))
}

fn as_map<'v>(value: &'v Value, what: &str) -> Result<&'v [(Value, Value)], CodeObjectError> {
    value
        .as_map()
        .map(Vec::as_slice)
        .ok_or_else(|| CodeObjectError(format!("{what} is {}, expected a map", describe(value))))
}

/// An unsigned 32-bit integer, whether encoded as a MessagePack uint or int.
fn to_u32(value: &Value, what: &str) -> Result<u32, CodeObjectError> {
    let Value::Integer(i) = value else {
        return err(format!("{what} is {}, expected an integer", describe(value)));
    };
    let n = match (i.as_u64(), i.as_i64()) {
        (Some(u), _) => u128::from(u),
        (None, Some(s)) => return err(format!("{what} is {s}, expected a non-negative integer")),
        (None, None) => return err(format!("{what} is not a representable integer")),
    };
    u32::try_from(n).or_else(|_| err(format!("{what} is {n}, larger than 32 bits")))
}

fn to_bool(value: &Value, what: &str) -> Result<bool, CodeObjectError> {
    match value {
        Value::Boolean(b) => Ok(*b),
        // Some writers encode flags as 0/1.
        Value::Integer(i) if i.as_u64() == Some(0) => Ok(false),
        Value::Integer(i) if i.as_u64() == Some(1) => Ok(true),
        _ => err(format!("{what} is {}, expected a boolean", describe(value))),
    }
}

fn to_string(value: &Value, what: &str) -> Result<String, CodeObjectError> {
    match value {
        Value::String(s) => match s.as_str() {
            Some(s) => Ok(s.to_string()),
            None => err(format!("{what} is not valid UTF-8")),
        },
        Value::Binary(b) => match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => err(format!("{what} is not valid UTF-8")),
        },
        _ => err(format!("{what} is {}, expected a string", describe(value))),
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Boolean(b) => format!("the boolean {b}"),
        Value::Integer(i) => format!("the integer {i}"),
        Value::F32(_) | Value::F64(_) => "a float".into(),
        Value::String(_) => "a string".into(),
        Value::Binary(_) => "binary data".into(),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Map(m) => format!("a map of {}", m.len()),
        Value::Ext(t, _) => format!("an extension of type {t}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Mp, arg, decode_err, encode, kernel_map, metadata_with, probe_args, probe_metadata};

    #[test]
    fn decodes_the_probe_metadata() {
        let m = decode(&encode(&probe_metadata(), false)).unwrap();
        assert_eq!(m.version, (1, 2));
        assert_eq!(m.target, "amdgcn-amd-amdhsa--gfx1151");
        assert_eq!(m.kernels.len(), 1);
        let k = &m.kernels[0];
        assert_eq!((k.name.as_str(), k.symbol.as_str()), ("probe", "probe.kd"));
        assert_eq!(k.wavefront_size, 32);
        assert_eq!(k.group_segment_fixed_size, 0);
        assert_eq!(k.private_segment_fixed_size, 0);
        assert!(!k.uses_dynamic_stack);
        assert_eq!((k.sgpr_count, k.vgpr_count, k.agpr_count), (12, 21, 0));
        assert_eq!((k.sgpr_spill_count, k.vgpr_spill_count), (0, 0));
        assert_eq!((k.kernarg_segment_size, k.kernarg_segment_align), (272, 8));
        assert_eq!(k.max_flat_workgroup_size, 1024);
        assert_eq!(k.uniform_work_group_size, None);
        assert!(!k.has_descriptor_symbol && k.float_modes.is_none());
        assert_eq!(k.args.len(), 4);
        assert_eq!(k.args[0].name.as_deref(), Some("out"));
        assert_eq!(k.args[0].address_space.as_deref(), Some("global"));
        assert_eq!((k.args[0].offset, k.args[0].size), (0, 8));
        assert_eq!(k.args[0].value_kind, "global_buffer");
        assert!(!k.args[0].is_hidden() && !k.args[1].is_hidden());
        assert!(k.args[2].is_hidden() && k.args[3].is_hidden());
        assert_eq!(k.args[1].name.as_deref(), Some("n"));
        assert_eq!(k.args[2].name, None);
    }

    #[test]
    fn accepts_signed_integer_encoding() {
        let a = decode(&encode(&probe_metadata(), false)).unwrap();
        let b = decode(&encode(&probe_metadata(), true)).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn v3_metadata_needs_no_target() {
        let meta = Mp::M(vec![("amdhsa.version", Mp::A(vec![Mp::U(1), Mp::U(0)]))]);
        let m = decode(&encode(&meta, false)).unwrap();
        assert_eq!((m.version, m.target.as_str(), m.kernels.len()), ((1, 0), "", 0));
    }

    #[test]
    fn malformed_msgpack() {
        // Empty descriptor.
        assert!(decode_err(&[]).contains("not valid MessagePack"));
        // A string cut short.
        assert!(decode_err(&[0xa5, b'a']).contains("not valid MessagePack"));
        // rmpv reads the reserved marker 0xc1 as nil.
        let e = decode_err(&[0xc1]);
        assert!(e.contains("metadata root is nil, expected a map"), "{e}");
        // A map that claims more entries than there are.
        assert!(decode_err(&[0xde, 0xff, 0xff, 0xa1, b'x']).contains("not valid MessagePack"));
        // Deep nesting is refused, not recursed into.
        assert!(decode_err(&[0x91; 4096]).contains("not valid MessagePack"));
        // Not a map at the root.
        let e = decode_err(&encode(&Mp::A(vec![Mp::U(1)]), false));
        assert!(e.contains("metadata root is an array of 1, expected a map"), "{e}");
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let good = encode(&probe_metadata(), false);
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "prefix of {len} bytes decoded");
        }
        for i in 0..good.len() {
            for x in [0xff, 0x80, 0x01, 0x10] {
                let mut bad = good.clone();
                bad[i] ^= x;
                let _ = decode(&bad);
            }
        }
    }

    #[test]
    fn malformed_metadata_values() {
        let check = |meta: Mp, want: &str| {
            let e = decode_err(&encode(&meta, false));
            assert!(e.contains(want), "{e:?} does not contain {want:?}");
        };
        check(Mp::M(vec![]), "no amdhsa.version");
        check(Mp::M(vec![("amdhsa.version", Mp::U(1))]), "amdhsa.version is the integer 1");
        check(Mp::M(vec![("amdhsa.version", Mp::A(vec![Mp::U(1), Mp::U(2)]))]), "no amdhsa.target");

        let with_kernel_key = |key: &'static str, value: Option<Mp>| {
            let mut k = kernel_map("probe", "probe.kd", probe_args());
            k.retain(|(k, _)| *k != key);
            if let Some(v) = value {
                k.push((key, v));
            }
            metadata_with(vec![k])
        };
        check(with_kernel_key(".wavefront_size", None), "kernel `probe` has no .wavefront_size");
        check(with_kernel_key(".name", None), "amdhsa.kernels[0] has no .name");
        check(with_kernel_key(".symbol", Some(Mp::U(3))), "kernel `probe` .symbol is the integer 3");
        check(
            with_kernel_key(".vgpr_count", Some(Mp::I(-1))),
            "kernel `probe` .vgpr_count is -1, expected a non-negative integer",
        );
        check(
            with_kernel_key(".vgpr_count", Some(Mp::U(1 << 40))),
            "kernel `probe` .vgpr_count is 1099511627776, larger than 32 bits",
        );
        check(
            with_kernel_key(".uses_dynamic_stack", Some(Mp::S("no"))),
            ".uses_dynamic_stack is a string, expected a boolean",
        );
        check(with_kernel_key(".args", Some(Mp::U(0))), ".args is the integer 0, expected an array");
        check(
            with_kernel_key(".args", Some(Mp::A(vec![Mp::M(vec![(".offset", Mp::U(0))])]))),
            "kernel `probe` .args[0] has no .size",
        );
        check(
            with_kernel_key(".args", Some(Mp::A(vec![Mp::M(vec![(".offset", Mp::U(0)), (".size", Mp::U(8))])]))),
            "kernel `probe` .args[0] has no .value_kind",
        );
        check(with_kernel_key(".name", Some(Mp::Raw(vec![0xa2, 0xff, 0xfe]))), ".name is not valid UTF-8");
        check(
            metadata_with(vec![kernel_map("probe", "probe.kd", vec![Mp::U(7), arg(0, 8, "by_value")])]),
            "kernel `probe` .args[0] is the integer 7, expected a map",
        );
    }

    #[test]
    fn optional_keys() {
        let mut k = kernel_map("probe", "probe.kd", vec![]);
        k.retain(|(k, _)| !matches!(*k, ".sgpr_spill_count" | ".vgpr_spill_count" | ".uses_dynamic_stack" | ".args"));
        k.push((".agpr_count", Mp::U(4)));
        k.push((".uniform_work_group_size", Mp::U(1)));
        k.push((".dynamic_lds_size", Mp::U(64)));
        let m = decode(&encode(&metadata_with(vec![k]), false)).unwrap();
        let k = &m.kernels[0];
        assert_eq!((k.sgpr_spill_count, k.vgpr_spill_count, k.uses_dynamic_stack), (0, 0, false));
        assert!(k.args.is_empty());
        assert_eq!(k.agpr_count, 4);
        assert_eq!(k.uniform_work_group_size, Some(true));
        assert_eq!(k.dynamic_lds_size, Some(64));
    }

    #[test]
    fn float_modes_of_descriptor_bytes() {
        let mut kd = [0u8; 64];
        // round 0/0, denormals 3/3: bits 16-19 set.
        kd[48..52].copy_from_slice(&(0xfu32 << 16).to_le_bytes());
        let m = FloatModes::from_descriptor(&kd).unwrap();
        assert!(m.is_ieee_exact());
        kd[48..52].copy_from_slice(&0u32.to_le_bytes());
        assert!(!FloatModes::from_descriptor(&kd).unwrap().is_ieee_exact());
        assert_eq!(FloatModes::from_descriptor(&kd[..51]), None);
        let exact = FloatModes { round_32: 0, round_16_64: 0, denorm_32: 3, denorm_16_64: 3 };
        assert!(!FloatModes { denorm_32: 0, ..exact }.is_ieee_exact());
        assert!(!FloatModes { round_16_64: 3, ..exact }.is_ieee_exact());
    }
}
