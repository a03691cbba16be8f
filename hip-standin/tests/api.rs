//! The stand-in's C functions called directly (the rlib of the same crate; its
//! state is separate from the cdylib that hip.rs loads): what the loader refuses,
//! and how a faulting kernel is reported.
use amdhip64_standin as hip;
use mlxcel_amdgpu::embedded::AMDGPU_CODE_OBJECTS;
use std::ffi::{CStr, c_void};
use std::ptr;

fn object(processor: &str) -> Vec<u64> {
    let o = AMDGPU_CODE_OBJECTS.iter().find(|o| o.processor == processor).expect("embedded object");
    let mut image = vec![0u64; o.bytes.len().div_ceil(8)];
    unsafe { ptr::copy_nonoverlapping(o.bytes.as_ptr(), image.as_mut_ptr() as *mut u8, o.bytes.len()) };
    image
}

#[test]
fn the_loader_refuses_what_the_runtime_would() {
    let mut m: *mut c_void = ptr::null_mut();
    // Not an ELF.
    let junk = [0u64; 16];
    assert_eq!(unsafe { hip::hipModuleLoadData(&mut m, junk.as_ptr() as *const c_void) }, hip::INVALID_IMAGE);
    // The gfx1151 object on the gfx1100 device; the generic one loads there.
    assert_eq!(hip::hipSetDevice(1), hip::SUCCESS);
    let gfx1151 = object("gfx1151");
    assert_eq!(unsafe { hip::hipModuleLoadData(&mut m, gfx1151.as_ptr() as *const c_void) }, hip::NO_BINARY_FOR_GPU);
    let generic = object("gfx11-generic");
    assert_eq!(unsafe { hip::hipModuleLoadData(&mut m, generic.as_ptr() as *const c_void) }, hip::SUCCESS);
    let mut f: *mut c_void = ptr::null_mut();
    assert_eq!(unsafe { hip::hipModuleGetFunction(&mut f, m, c"no_such_kernel".as_ptr()) }, hip::NOT_FOUND);
    assert_eq!(hip::hipModuleUnload(m), hip::SUCCESS);
    assert_eq!(hip::hipModuleUnload(m), hip::INVALID_HANDLE);
    assert_eq!(hip::hipSetDevice(2), hip::INVALID_DEVICE);
    assert_eq!(hip::hipSetDevice(0), hip::SUCCESS);
}

/// The `probe` kernel of the gfx1151 object, loaded on device 0.
fn probe_on_gfx1151() -> *mut c_void {
    assert_eq!(hip::hipSetDevice(0), hip::SUCCESS);
    let image = object("gfx1151");
    let mut m: *mut c_void = ptr::null_mut();
    assert_eq!(unsafe { hip::hipModuleLoadData(&mut m, image.as_ptr() as *const c_void) }, hip::SUCCESS);
    let mut f: *mut c_void = ptr::null_mut();
    assert_eq!(unsafe { hip::hipModuleGetFunction(&mut f, m, c"probe".as_ptr()) }, hip::SUCCESS);
    f
}

#[test]
fn an_out_of_bounds_store_fails_the_launch_and_says_where() {
    let f = probe_on_gfx1151();
    // probe writes 17 words per thread; give it room for one thread only.
    let mut out: *mut c_void = ptr::null_mut();
    assert_eq!(unsafe { hip::hipMalloc(&mut out, 68) }, hip::SUCCESS);
    let mut arg = out as u64;
    let mut params = [&mut arg as *mut u64 as *mut c_void];
    let status = unsafe {
        hip::hipModuleLaunchKernel(f, 1, 1, 1, 64, 1, 1, 256, ptr::null_mut(), params.as_mut_ptr(), ptr::null_mut())
    };
    assert_eq!(status, hip::LAUNCH_FAILURE);
    let text = unsafe { CStr::from_ptr(hip::hipGetErrorString(status)) }.to_string_lossy().into_owned();
    println!("{text}");
    assert!(text.contains("kernel probe") && text.contains("global_store") && text.contains("lane"), "{text}");
    assert!(text.contains("past the end of hipMalloc(68)"), "{text}");
    // A workgroup memory size past 64 KiB is refused too.
    let status = unsafe {
        hip::hipModuleLaunchKernel(f, 1, 1, 1, 64, 1, 1, 65537, ptr::null_mut(), params.as_mut_ptr(), ptr::null_mut())
    };
    assert_eq!(status, hip::LAUNCH_FAILURE);
    assert_eq!(hip::hipFree(out), hip::SUCCESS);
    assert_eq!(hip::hipFree(out), hip::INVALID_DEVICE_POINTER);
}

#[test]
fn stream_ordered_memory_and_the_stream_device() {
    // Only the NULL stream exists: it is the current device's.
    let mut dev = -1;
    assert_eq!(hip::hipSetDevice(1), hip::SUCCESS);
    assert_eq!(unsafe { hip::hipStreamGetDevice(ptr::null_mut(), &mut dev) }, hip::SUCCESS);
    assert_eq!(dev, 1);
    assert_eq!(hip::hipSetDevice(0), hip::SUCCESS);
    assert_eq!(unsafe { hip::hipStreamGetDevice(ptr::null_mut(), &mut dev) }, hip::SUCCESS);
    assert_eq!(dev, 0);
    let bogus = 0x1234 as *mut c_void;
    assert_eq!(unsafe { hip::hipStreamGetDevice(bogus, &mut dev) }, hip::INVALID_HANDLE);
    let text = unsafe { CStr::from_ptr(hip::hipGetErrorString(hip::INVALID_HANDLE)) }.to_string_lossy().into_owned();
    assert_eq!(text, "invalid resource handle");
    assert_eq!(unsafe { hip::hipStreamGetDevice(ptr::null_mut(), ptr::null_mut()) }, hip::INVALID_VALUE);
    // hipMallocAsync / hipFreeAsync on the NULL stream; the free takes effect at once.
    let mut p: *mut c_void = ptr::null_mut();
    assert_eq!(unsafe { hip::hipMallocAsync(&mut p, 100, ptr::null_mut()) }, hip::SUCCESS);
    assert_eq!(unsafe { hip::hipMemcpyHtoD(p, [7u8; 100].as_ptr() as *const c_void, 100) }, hip::SUCCESS);
    let mut name = [0 as std::ffi::c_char; 64];
    assert_eq!(unsafe { hip::hipStandinAllocationName(p, name.as_mut_ptr(), name.len()) }, 19);
    assert_eq!(unsafe { CStr::from_ptr(name.as_ptr()) }, c"hipMallocAsync(100)");
    assert_eq!(hip::hipFreeAsync(p, ptr::null_mut()), hip::SUCCESS);
    assert_eq!(unsafe { hip::hipStandinAllocationName(p, ptr::null_mut(), 0) }, -1);
    assert_eq!(hip::hipFreeAsync(p, ptr::null_mut()), hip::INVALID_DEVICE_POINTER);
    assert_eq!(unsafe { hip::hipMallocAsync(&mut p, 100, bogus) }, hip::INVALID_HANDLE);
    assert_eq!(hip::hipFreeAsync(ptr::null_mut(), bogus), hip::INVALID_HANDLE);
}

/// A kernel node keeps `kernelParams` by pointer: a replay reads the
/// arguments as they are then, as CLR's nodes do.
#[test]
fn a_captured_launch_reads_its_arguments_at_each_replay() {
    let f = probe_on_gfx1151();
    let (mut a, mut b): (*mut c_void, *mut c_void) = (ptr::null_mut(), ptr::null_mut());
    assert_eq!(unsafe { hip::hipMalloc(&mut a, 68 * 64) }, hip::SUCCESS);
    assert_eq!(unsafe { hip::hipMalloc(&mut b, 68 * 64) }, hip::SUCCESS);
    let mut stream: *mut c_void = ptr::null_mut();
    assert_eq!(unsafe { hip::hipStreamCreateWithFlags(&mut stream, 1) }, hip::SUCCESS);
    let mut arg = a as u64;
    let mut params = [&mut arg as *mut u64 as *mut c_void];
    let params = params.as_mut_ptr();
    assert_eq!(hip::hipStreamBeginCapture(stream, 1), hip::SUCCESS);
    let launch = |s| unsafe { hip::hipModuleLaunchKernel(f, 1, 1, 1, 64, 1, 1, 256, s, params, ptr::null_mut()) };
    assert_eq!(launch(stream), hip::SUCCESS);
    // A legacy-stream synchronization inside the capture invalidates it.
    let mut graph: *mut c_void = ptr::null_mut();
    assert_eq!(unsafe { hip::hipStreamEndCapture(stream, &mut graph) }, hip::SUCCESS);
    let mut exec: *mut c_void = ptr::null_mut();
    assert_eq!(
        unsafe { hip::hipGraphInstantiate(&mut exec, graph, ptr::null_mut(), ptr::null_mut(), 0) },
        hip::SUCCESS
    );
    let read = |p: *mut c_void| {
        let mut words = vec![0u32; 17 * 64];
        assert_eq!(unsafe { hip::hipMemcpyDtoH(words.as_mut_ptr() as *mut c_void, p, 68 * 64) }, hip::SUCCESS);
        words
    };
    assert_eq!(hip::hipMemset(a, 0, 68 * 64), hip::SUCCESS);
    assert_eq!(hip::hipMemset(b, 0, 68 * 64), hip::SUCCESS);
    assert_eq!(hip::hipGraphLaunch(exec, stream), hip::SUCCESS);
    assert!(read(a).iter().any(|&w| w != 0) && read(b).iter().all(|&w| w == 0));
    // The argument now names `b`: the replay writes there.
    unsafe { *(*params as *mut u64) = b as u64 };
    assert_eq!(hip::hipGraphLaunch(exec, stream), hip::SUCCESS);
    assert_eq!(read(a), read(b));
    assert_eq!(hip::hipGraphExecDestroy(exec), hip::SUCCESS);
    assert_eq!(hip::hipGraphDestroy(graph), hip::SUCCESS);

    assert_eq!(hip::hipStreamBeginCapture(stream, 1), hip::SUCCESS);
    assert_eq!(hip::hipDeviceSynchronize(), hip::STREAM_CAPTURE_IMPLICIT);
    assert_eq!(launch(stream), hip::STREAM_CAPTURE_INVALIDATED);
    assert_eq!(unsafe { hip::hipStreamEndCapture(stream, &mut graph) }, hip::STREAM_CAPTURE_INVALIDATED);
    assert!(graph.is_null());
    assert_eq!(hip::hipStreamDestroy(stream), hip::SUCCESS);
    assert_eq!(hip::hipFree(a), hip::SUCCESS);
    assert_eq!(hip::hipFree(b), hip::SUCCESS);
}
