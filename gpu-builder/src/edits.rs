//! Every text edit the GPU build makes to what LLVM produced, and the checks
//! of the PTX text: rustc has no way to state launch bounds, so the build
//! states them in the LLVM IR (AMD) and in the PTX (NVIDIA). Each edit
//! refuses input it does not expect rather than guess; `tests/golden/` holds
//! an input and the exact output of each.

/// The function attribute that bounds an AMD kernel's workgroup size.
pub const FLAT_WORK_GROUP_SIZE: &str = "amdgpu-flat-work-group-size";

/// LLVM IR text with `"amdgpu-flat-work-group-size"="1,<size>"` among the
/// function attributes of every kernel of `bounds` that the IR defines (each
/// at most once), or `None` if it defines none of them. Every size must be
/// whole waves of `wave_size` lanes, at most 1024 threads. The IR must not
/// state the attribute already.
pub fn with_flat_work_group_sizes(ir: &str, bounds: &[(&str, u32)], wave_size: u32) -> Result<Option<String>, String> {
    if ir.contains(FLAT_WORK_GROUP_SIZE) {
        return Err(format!(
            "the kernels' LLVM IR already states {FLAT_WORK_GROUP_SIZE}; the launch-bounds step would contradict it"
        ));
    }
    let mut lines: Vec<String> = ir.lines().map(str::to_string).collect();
    let mut applied = 0;
    for &(kernel, size) in bounds {
        if wave_size == 0 || size == 0 || size % wave_size != 0 || size > 1024 {
            return Err(format!(
                "the launch bound of {kernel} is {size}: expected whole waves of {wave_size}, at most 1024 threads"
            ));
        }
        let head = format!("define amdgpu_kernel void @{kernel}(");
        let found: Vec<usize> =
            lines.iter().enumerate().filter(|(_, l)| l.starts_with(&head)).map(|(i, _)| i).collect();
        let at = match found[..] {
            [] => continue,
            [at] => at,
            _ => return Err(format!("the kernels' LLVM IR defines {kernel} {} times, expected once", found.len())),
        };
        applied += 1;
        let Some(signature) = lines[at].strip_suffix(" {") else {
            return Err(format!(
                "the definition of {kernel} does not end its line with its body's `{{`: {}",
                lines[at]
            ));
        };
        lines[at] = format!("{signature} \"{FLAT_WORK_GROUP_SIZE}\"=\"1,{size}\" {{");
    }
    if applied == 0 {
        return Ok(None);
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(Some(out))
}

/// A PTX line without its indentation and predicate guard (`@%p1 call ...`).
pub fn ptx_instruction(line: &str) -> &str {
    let l = line.trim_start();
    if l.starts_with('@') { l.split_once(char::is_whitespace).map_or("", |(_, rest)| rest.trim_start()) } else { l }
}

/// Checks PTX text as the CUDA backend needs it: an entry point for each of
/// `entries`, and every kernel body inlined into its entry (a call would pass
/// arguments through the ABI and may need a stack, local memory).
pub fn check_ptx(ptx: &str, entries: &[&str]) -> Result<(), String> {
    for k in entries {
        if !ptx.contains(&format!(".entry {k}(")) {
            return Err(format!("the PTX has no entry point {k}"));
        }
    }
    if let Some(line) = ptx
        .lines()
        .find(|l| ptx_instruction(l).starts_with("call") || l.starts_with(".func") || l.contains("__local_depot"))
    {
        return Err(format!(
            "the PTX calls a function or uses a local stack ({}): mark the kernel body #[inline(always)]",
            line.trim()
        ));
    }
    Ok(())
}

/// The PTX with `.maxntid <size>, 1, 1` and `.minnctapersm <per_sm>` after the
/// parameter list of every entry `(name, size, per_sm)` of `bounds` names
/// (PTX's performance-tuning directives sit between an entry's parameters and
/// its body). Every entry of `bounds` must be in the PTX, without such a
/// directive already.
pub fn with_ptx_launch_bounds(ptx: &str, bounds: &[(&str, u32, u32)]) -> Result<String, String> {
    let mut out = String::with_capacity(ptx.len() + 1024);
    let mut pending: Option<(u32, u32)> = None;
    let mut applied = 0;
    for line in ptx.lines() {
        if let Some(name) = line.strip_prefix(".visible .entry ") {
            let symbol = name.split('(').next().unwrap_or("");
            pending = bounds.iter().find(|(k, _, _)| *k == symbol).map(|&(_, size, per_sm)| (size, per_sm));
        }
        if pending.is_some()
            && (line.starts_with(".maxntid")
                || line.starts_with(".minnctapersm")
                || line.starts_with(".reqntid")
                || line.starts_with(".maxnreg"))
        {
            return Err(format!("the PTX already has a performance directive ({line}) on an entry the bounds name"));
        }
        if line == "{"
            && let Some((size, per_sm)) = pending.take()
        {
            out.push_str(&format!(".maxntid {size}, 1, 1\n.minnctapersm {per_sm}\n"));
            applied += 1;
        }
        out.push_str(line);
        out.push('\n');
    }
    if applied != bounds.len() {
        return Err(format!("launch bounds applied to {applied} PTX entries, expected {bounds:?}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const IR_BOUNDS: &[(&str, u32)] = &[("xielu_f32", 256), ("moe_down_bf16", 128)];
    const PTX_BOUNDS: &[(&str, u32, u32)] = &[("xielu_f32", 256, 4), ("moe_down_bf16", 128, 8)];

    #[test]
    fn golden_ir() {
        let input = include_str!("../tests/golden/kernels.ll");
        let want = include_str!("../tests/golden/kernels.bounded.ll");
        let got = with_flat_work_group_sizes(input, IR_BOUNDS, 32).unwrap().unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn golden_ptx() {
        let input = include_str!("../tests/golden/kernels.ptx");
        let want = include_str!("../tests/golden/kernels.bounded.ptx");
        check_ptx(input, &["xielu_f32", "moe_down_bf16", "other"]).unwrap();
        let got = with_ptx_launch_bounds(input, PTX_BOUNDS).unwrap();
        assert_eq!(got, want);
        check_ptx(&got, &["xielu_f32", "moe_down_bf16", "other"]).unwrap();
    }

    #[test]
    fn ir_edits_refuse_what_they_do_not_expect() {
        let ir = "define amdgpu_kernel void @xielu_f32(ptr %x) unnamed_addr #0 {\n  ret void\n}\n";
        // None of them defined (a test object): nothing to do.
        assert_eq!(with_flat_work_group_sizes("define amdgpu_kernel void @other() #0 {\n}\n", IR_BOUNDS, 32), Ok(None));
        // Twice, the attribute already there, no `{` at the end, or a bad size: refused.
        let twice = format!("{ir}{ir}");
        assert!(with_flat_work_group_sizes(&twice, IR_BOUNDS, 32).unwrap_err().contains("2 times"));
        let stated = ir.replace("#0 {", "#0 \"amdgpu-flat-work-group-size\"=\"1,256\" {");
        assert!(with_flat_work_group_sizes(&stated, IR_BOUNDS, 32).unwrap_err().contains("already states"));
        let open = ir.replace("#0 {", "#0");
        assert!(with_flat_work_group_sizes(&open, IR_BOUNDS, 32).unwrap_err().contains("does not end its line"));
        for size in [0, 48, 2048] {
            let err = with_flat_work_group_sizes(ir, &[("xielu_f32", size)], 32).unwrap_err();
            assert!(err.contains("expected whole waves"), "{err}");
        }
    }

    #[test]
    fn ptx_edits_and_checks_refuse_what_they_do_not_expect() {
        // A named entry missing, or one that already has a directive: refused.
        assert!(with_ptx_launch_bounds(".visible .entry other(\n)\n{\n}\n", PTX_BOUNDS).is_err());
        let input = include_str!("../tests/golden/kernels.ptx");
        let doubled = input.replacen(")\n{", ")\n.maxntid 64, 1, 1\n{", 1);
        assert!(
            with_ptx_launch_bounds(&doubled, PTX_BOUNDS).unwrap_err().contains("already has a performance directive")
        );
        assert!(check_ptx(input, &["absent"]).unwrap_err().contains("no entry point absent"));
        let call = input.replacen("\tret;", "\t@%p1 call helper;\n\tret;", 1);
        assert!(check_ptx(&call, &[]).unwrap_err().contains("calls a function"));
        let stack = input.replacen("\tret;", "\t.local .align 4 .b8 __local_depot0[16];\n\tret;", 1);
        assert!(check_ptx(&stack, &[]).unwrap_err().contains("local stack"));
    }

    #[test]
    fn ptx_instructions_without_guards() {
        assert_eq!(ptx_instruction("\t@%p1 call foo;"), "call foo;");
        assert_eq!(ptx_instruction("    ld.global.f32 %f1, [%rd1];"), "ld.global.f32 %f1, [%rd1];");
        assert_eq!(ptx_instruction("@%p1"), "");
    }
}
